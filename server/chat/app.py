"""The application factory: the chat backend on a Quart-Trio app, with or without a runner.

:func:`create_chat_app` builds on :func:`sandstream.server.runner.app.create_app` when the
service has an embedded runner (so one process serves ``POST /stream`` and the chat
API and runs turns in-process), or on a bare Quart-Trio app when every turn goes to a
remote runner. It mounts:

- ``/api/assistant/...`` — the chat turn (SSE) and the chats API (API token);
- ``/api/agents/run``, ``/api/workflows/{id}/environment`` (API token);
- ``/api/sandbox/{sessionId}/env|config|results`` — the sandbox callbacks (one-time
  tokens);
- ``GET /healthz`` (the runner's, or the chat backend's own without a runner).

:func:`serve_chat` runs it on Hypercorn: at start-up and every ``sweep_interval``
it settles turns a dead process left (``turn_lost``); on shutdown, live turns end
with ``error{code:"shutdown"}`` and are persisted before connections close.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import trio
from hypercorn.config import Config
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable
from quart import Blueprint, Response
from quart_trio import QuartTrio

from sandstream.server.http.problems import SHUTTING_DOWN, install_problem_handlers, problem
from sandstream.server.http.requests import json_response
from sandstream.server.http.serve import serve
from sandstream.server.runner.app import create_app
from sandstream.server.runner.routes import TurnAwareHTTPConnection

from .app_state import CHAT_EXTENSION, get_service
from .errors_http import install_chat_error_handlers
from .live import LiveTurn
from .multipart import PART_OVERHEAD
from .routes_agents import agents_blueprint
from .routes_callbacks import callbacks_blueprint
from .routes_chat import chat_blueprint
from .routes_ui import ui_blueprint
from .routes_web import web_blueprint
from .service import PENDING_TURNS, ChatService

__all__ = ["ChatAwareHTTPConnection", "create_chat_app", "serve_chat"]

health_blueprint = Blueprint("chat_health", __name__)


@health_blueprint.get("/healthz")
async def healthz() -> Response:
    """200 ``{"status": "ok", "live": n}``; 503 problem while shutting down."""
    service = get_service()
    if service.live.draining:
        return problem(503, "Shutting down", "the server is shutting down", type=SHUTTING_DOWN)
    return json_response({"status": "ok", "live": len(service.live)})


class ChatAwareHTTPConnection(TurnAwareHTTPConnection):
    """The runner's turn-aware connection, also settling chat turns whose body never
    started (the client left between the route and the first byte)."""

    async def __call__(self, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        try:
            await super().__call__(receive, send)
        finally:
            pending: list[LiveTurn] = self.scope.get(PENDING_TURNS, [])  # type: ignore[assignment]
            if pending:
                with trio.CancelScope(shield=True):
                    for turn in pending:
                        await turn.abandon()


def create_chat_app(service: ChatService) -> QuartTrio:
    """A Quart-Trio app serving the chat backend (and the runner, if ``service`` has one)."""
    if service.runner is not None:
        app = create_app(service.runner.settings, runner=service.runner)
        runner_limit = service.runner.settings.max_body_bytes
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        app = QuartTrio(
            "sandstream.server.chat", root_path=here, instance_path=os.path.join(here, "instance")
        )
        install_problem_handlers(app)
        app.register_blueprint(health_blueprint)
        runner_limit = 0
    settings = service.settings
    # Bodies are streamed and bounded per route; this only has to let them through.
    app.config["MAX_CONTENT_LENGTH"] = max(
        runner_limit,
        settings.max_json_bytes,
        settings.max_upload_bytes + (settings.max_upload_files + 1) * PART_OVERHEAD,
        settings.max_results_bytes + (settings.max_results_files + 1) * PART_OVERHEAD,
    )
    app.extensions[CHAT_EXTENSION] = service
    app.asgi_http_class = ChatAwareHTTPConnection
    install_chat_error_handlers(app)
    app.register_blueprint(chat_blueprint)
    app.register_blueprint(ui_blueprint)
    app.register_blueprint(agents_blueprint)
    app.register_blueprint(callbacks_blueprint)
    app.register_blueprint(web_blueprint)

    @app.after_serving
    async def _shutdown_chat() -> None:
        await service.shutdown()

    return app


async def serve_chat(
    app: QuartTrio,
    config: Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Sweep lost turns, serve ``app`` until ``shutdown_trigger`` returns, then drain.

    Before listening, turns whose lock expired while no process held them are
    settled (:meth:`ChatService.sweep`); while serving, the sweep runs again every
    ``sweep_interval``. Draining: live turns end with ``error{code:"shutdown"}`` and settle (their
    messages persisted, their locks released), then the embedded runner shuts down
    (every container reaped), then Hypercorn closes. ``task_status.started`` gets
    the bound addresses. Cancellation: Hypercorn stops at once; turns still settle
    (shielded) and containers are still reaped.
    """
    service = get_service(app)
    await service.sweep()

    async with trio.open_nursery() as nursery:

        async def serve_then_stop_sweeping(
            *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
        ) -> None:
            try:
                await serve(
                    app,
                    config,
                    shutdown_trigger=shutdown_trigger,
                    drain=service.shutdown,
                    task_status=task_status,
                )
            finally:
                nursery.cancel_scope.cancel()

        nursery.start_soon(service.sweep_periodically)
        binds: list[str] = await nursery.start(serve_then_stop_sweeping)
        if service.bound_url is None and binds:
            service.bound_url = _callback_url(binds[0])
        task_status.started(binds)


def _callback_url(bind: str) -> str:
    """The bound address as a URL sandboxes on this host can call."""
    url = bind.rstrip("/")
    for wildcard in ("://0.0.0.0:", "://[::]:"):
        url = url.replace(wildcard, "://127.0.0.1:")
    return url
