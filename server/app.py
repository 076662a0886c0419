"""The application factories: the roles composed into one Quart-Trio app.

- :func:`create_runner_app` (``sandstream runner``): ``POST /stream``, ``GET /healthz``,
  and with ``sessions`` the durable sessions;
- :func:`create_chat_app` (``sandstream serve``): the chat backend and the web app, on
  the embedded runner and its sessions or on remote runners only.

Serve an app with :func:`sandstream.server.http.serve.serve` (the chat's with
:func:`~sandstream.server.chat.serving.serve_chat`) so that shutdown ends live turns first.
A composition that cannot work raises :class:`~sandstream.server.chat.errors.ChatConfigError`.
"""

from __future__ import annotations

import os

from quart_trio import QuartTrio

from .chat.errors import ChatConfigError
from .chat.service import ChatService
from .chat.serving import install_chat
from .http.problems import install_problem_handlers
from .runner.launcher import ContainerLauncher
from .runner.routes import install_runner
from .runner.service import Runner
from .runner.settings import RunnerSettings
from .sessions import SessionService, SessionSettings, get_sessions, install_sessions
from .web.routes import web_blueprint

__all__ = ["create_chat_app", "create_runner_app"]


def create_runner_app(
    settings: RunnerSettings,
    *,
    sessions: SessionSettings | None = None,
    launcher: ContainerLauncher | None = None,
    runner: Runner | None = None,
) -> QuartTrio:
    """The runner's app: ``POST /stream``, ``GET /healthz``, and with ``sessions`` the
    durable sessions.

    Pass ``runner`` to share one with other code (it then wins over ``settings`` and
    ``launcher``); otherwise one is made from ``settings`` and ``launcher`` (default:
    :func:`~sandstream.server.runner.service.default_launcher`: bubblewrap sandboxes
    where ``bwrap`` is installed).
    """
    runner = runner or Runner(settings, launcher)
    app = _new_app()
    app.config["MAX_CONTENT_LENGTH"] = runner.settings.max_body_bytes
    install_runner(app, runner)
    if sessions is not None:
        install_sessions(app, SessionService(runner, sessions))
    return app


def create_chat_app(service: ChatService, *, sessions: SessionSettings | None = None) -> QuartTrio:
    """The chat backend's app, with the web app, and the runner and its durable
    sessions when ``service`` has an embedded runner.

    Raises :class:`ChatConfigError` for an embedded runner without ``sessions``
    (chat turns run as sessions).
    """
    if service.runner is not None:
        if sessions is None:
            raise ChatConfigError("the embedded runner needs durable sessions (a data dir)")
        app = create_runner_app(service.runner.settings, sessions=sessions, runner=service.runner)
        service.sessions = get_sessions(app)
    else:
        app = _new_app()
    install_chat(app, service)
    app.register_blueprint(web_blueprint)
    return app


def _new_app() -> QuartTrio:
    """A bare Quart-Trio app whose every error is problem JSON."""
    # Explicit paths: Flask's package discovery fails on an editable namespace install.
    here = os.path.dirname(os.path.abspath(__file__))
    app = QuartTrio(
        "sandstream.server", root_path=here, instance_path=os.path.join(here, "instance")
    )
    install_problem_handlers(app)
    return app
