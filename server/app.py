"""The application factories: the roles composed into one Quart-Trio app.

- :func:`create_runner_app` (``sandstream runner``): ``POST /stream``, ``GET /healthz``,
  and with ``sessions`` the durable sessions;
- :func:`create_chat_app` (``sandstream serve``): the chat backend and the web app, on
  the embedded runner and its sessions or on remote runners only;
- both with ``GET /openapi.json``, their OpenAPI 3.1 description made from each role's
  table (:func:`~sandstream.server.http.openapi.mount_openapi`), and ``GET /docs``;
- :func:`create_metrics_app`: another app's ``GET /metrics`` alone, without a token,
  for a listener of its own (``--metrics-bind``).

Every app has its own Prometheus registry (:mod:`.http.metrics`) with each role's
collector on it, served as ``GET /metrics`` behind the role's tokens unless
``metrics_route=False`` (then :func:`create_metrics_app` serves it).

Serve an app with :func:`sandstream.server.http.serve.serve` (the chat's with
:func:`~sandstream.server.chat.serving.serve_chat`) so that shutdown ends running turns first.
A composition that cannot work raises :class:`~sandstream.server.chat.model.errors.ChatConfigError`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import partial

from quart_trio import QuartTrio

from sandstream.server.chat import install_chat
from sandstream.server.chat.api import CHAT_OPERATIONS, ChatService
from sandstream.server.chat.model import ChatConfigError
from sandstream.server.chat.mover import ChatTurnsCollector, MoverCollector, RedisLease
from sandstream.server.chat.store import SqlChatStore
from sandstream.server.databases import OperationsCollector, OperationTimes, PostgresDatabase
from sandstream.server.http import (
    get_metrics,
    install_metrics,
    install_problem_handlers,
    mount_metrics_route,
    mount_openapi,
)
from sandstream.server.runner import (
    RUNNER_OPERATIONS,
    ContainerLauncher,
    Runner,
    RunnerCollector,
    RunnerSettings,
    TurnTimes,
    install_runner,
)
from sandstream.server.sessions import (
    SESSION_STREAMS,
    SESSIONS_OPERATIONS,
    SessionsCollector,
    SessionService,
    SessionSettings,
    get_sessions,
    install_sessions,
)
from sandstream.server.streams import STREAMS_OPERATIONS, Streams, StreamStore, install_streams
from sandstream.server.web import WEB_OPERATIONS, web_blueprint

__all__ = ["create_chat_app", "create_metrics_app", "create_runner_app"]

_RUNNER_OPERATIONS = {**RUNNER_OPERATIONS, **SESSIONS_OPERATIONS, **STREAMS_OPERATIONS}


def create_runner_app(
    settings: RunnerSettings,
    *,
    sessions: SessionSettings | None = None,
    launcher: ContainerLauncher | None = None,
    runner: Runner | None = None,
    metrics_route: bool = True,
) -> QuartTrio:
    """The runner's app: ``POST /stream``, ``GET /healthz``, ``GET /metrics`` (the
    runner token; not with ``metrics_route=False``), and with ``sessions`` the durable
    sessions and the Durable Streams at ``/v1/stream/`` (their store:
    ``sessions.stream_settings``).

    Pass ``runner`` to share one with other code (it then wins over ``settings`` and
    ``launcher``); otherwise one is made from ``settings`` and ``launcher`` (default:
    :func:`~sandstream.server.runner.admission.default_launcher`: bubblewrap sandboxes
    where ``bwrap`` is installed).
    """
    runner = runner or Runner(settings, launcher)
    app = _new_app()
    install_metrics(app)
    _add_runner(app, runner, sessions)
    if metrics_route:
        token = runner.settings.token
        mount_metrics_route(app, get_metrics(app), None if token is None else [token])
    mount_openapi(app, _RUNNER_OPERATIONS, title="sandstream runner")
    return app


def _add_runner(app: QuartTrio, runner: Runner, sessions: SessionSettings | None) -> None:
    """The runner, and with ``sessions`` its durable sessions and Durable Streams, and
    their metrics."""
    registry = get_metrics(app).registry
    app.config["MAX_CONTENT_LENGTH"] = runner.settings.max_body_bytes
    install_runner(app, runner)
    registry.register(RunnerCollector(runner))
    TurnTimes(runner, registry)
    if sessions is not None:
        streams = sessions.stream_settings
        store = StreamStore.from_settings(streams, server_prefixes=(SESSION_STREAMS,))
        service = SessionService(runner, sessions, store)
        install_sessions(app, service)
        registry.register(SessionsCollector(service))
        install_streams(
            app, Streams(streams, store, runner.settings.token, reserved=(SESSION_STREAMS,))
        )


def create_chat_app(
    service: ChatService,
    *,
    sessions: SessionSettings | None = None,
    metrics_route: bool = True,
) -> QuartTrio:
    """The chat backend's app, with the web app, and the runner and its durable
    sessions when ``service`` has an embedded runner. ``GET /metrics`` takes the chat
    API token or the runner token (not with ``metrics_route=False``).

    Raises :class:`ChatConfigError` for an embedded runner without ``sessions``
    (chat turns run as sessions).
    """
    app = _new_app()
    metrics = install_metrics(app)
    runner_token = service.settings.runner_token
    if service.runner is not None:
        if sessions is None:
            raise ChatConfigError("the embedded runner needs durable sessions (a data dir)")
        _add_runner(app, service.runner, sessions)
        service.sessions = get_sessions(app)
        runner_token = service.runner.settings.token
    install_chat(app, service)
    metrics.registry.register(MoverCollector(lambda: service.turns.mover.log_mover))
    metrics.registry.register(ChatTurnsCollector(service.turns.settler.turns))
    metrics.registry.register(
        OperationsCollector(partial(_chat_stores, service), partial(_chat_pools, service))
    )
    app.register_blueprint(web_blueprint)
    if metrics_route:
        tokens = [service.settings.api_token, *([] if runner_token is None else [runner_token])]
        mount_metrics_route(app, metrics, tokens)
    operations = {**_RUNNER_OPERATIONS, **CHAT_OPERATIONS, **WEB_OPERATIONS}
    mount_openapi(app, operations, title="sandstream chat")
    return app


def _chat_stores(service: ChatService) -> Iterator[OperationTimes]:
    """The chat's database, and its Redis lease store if it has one."""
    yield service.store.operations
    lease = service.turns.mover.lease
    if isinstance(lease, RedisLease):
        yield lease.operations


def _chat_pools(service: ChatService) -> Iterator[tuple[str, Callable[[], tuple[int, float]]]]:
    """The chat database's connection pool, on PostgreSQL."""
    store = service.store
    if isinstance(store, SqlChatStore) and isinstance(store.db, PostgresDatabase):
        yield "postgresql", store.db.pool_waits


def create_metrics_app(app: QuartTrio) -> QuartTrio:
    """An app serving ``app``'s metrics as ``GET /metrics`` to anyone (nothing else:
    404 problem JSON), for a listener of their own; ``app`` must not serve them too."""
    metrics_app = _new_app()
    mount_metrics_route(metrics_app, get_metrics(app), None)
    return metrics_app


def _new_app() -> QuartTrio:
    """A bare Quart-Trio app whose every error is problem JSON."""
    # Explicit paths: Flask's package discovery fails on an editable namespace install.
    here = os.path.dirname(os.path.abspath(__file__))
    app = QuartTrio(
        "sandstream.server", root_path=here, instance_path=os.path.join(here, "instance")
    )
    install_problem_handlers(app)
    return app
