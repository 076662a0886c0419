"""The application factory: a Quart-Trio app with the runner mounted.

``create_app(settings)`` gives the runner alone (``sandstream runner``). A chat
backend builds its own app and calls :func:`~sandstream.server.runner.routes.install_runner`
on it with a :class:`~sandstream.server.runner.service.Runner`, so one process serves both and
uses the same runner in-process.
"""

from __future__ import annotations

import os

from quart_trio import QuartTrio

from sandstream.server.http.problems import install_problem_handlers

from .launcher import ContainerLauncher
from .routes import install_runner
from .service import Runner
from .settings import RunnerSettings

__all__ = ["create_app"]


def create_app(
    settings: RunnerSettings,
    *,
    launcher: ContainerLauncher | None = None,
    runner: Runner | None = None,
) -> QuartTrio:
    """A Quart-Trio app serving ``POST /stream`` and ``GET /healthz``.

    Pass ``runner`` to share one with other code (it then wins over ``settings`` and
    ``launcher``); otherwise one is made from ``settings`` and ``launcher`` (default:
    :func:`~sandstream.server.runner.service.default_launcher`: bubblewrap sandboxes
    where ``bwrap`` is installed). Every error is
    problem JSON. Serve it with :func:`sandstream.server.http.serve.serve` so that shutdown
    ends live turns with ``error{code:"shutdown"}`` before connections close.
    """
    # Explicit paths: Flask's package discovery fails on an editable namespace install.
    here = os.path.dirname(os.path.abspath(__file__))
    app = QuartTrio(
        "sandstream.server", root_path=here, instance_path=os.path.join(here, "instance")
    )
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    install_problem_handlers(app)
    install_runner(app, runner or Runner(settings, launcher))
    return app
