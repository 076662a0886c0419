"""Mounting the chat backend on an app (:func:`install_chat`) and serving it with its
log mover (:func:`serve_chat`).

The routes: ``/api/assistant/...`` (the chat turn over SSE, joining, stopping, follow-up,
the chats API, a chat's workspace), ``/api/agents/run`` and workflow environments —
these with CORS for ``settings.cors_origins`` —, the sandbox callbacks
``/api/sandbox/{sessionId}/...`` (the workspace snapshot ones too), ``GET /readyz``
(readiness: the database, Redis, the remote runner) and ``GET /healthz`` (liveness)
when no runner serves one. Cancellation of :func:`serve_chat`: Hypercorn stops at once;
containers are still reaped. A configuration that cannot work raises
:class:`~sandstream.server.chat.model.ChatConfigError` before anything listens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
from hypercorn.config import Config
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable
from quart import Blueprint, Response
from quart_trio import QuartTrio

from sandstream.server.chat.agents import PENDING_RUNS, RelayedRun
from sandstream.server.chat.api import (
    CHAT_EXTENSION,
    PART_OVERHEAD,
    ChatService,
    agents_blueprint,
    callbacks_blueprint,
    chat_blueprint,
    get_service,
    install_cors,
    largest_snapshot_body,
    push_ack_blueprint,
    push_blueprint,
    readiness_blueprint,
    snapshots_blueprint,
    stream_blueprint,
    ui_blueprint,
    workspace_blueprint,
)
from sandstream.server.http import SHUTTING_DOWN, json_response, problem, serve
from sandstream.server.runner import TurnAwareHTTPConnection

__all__ = ["ChatAwareHTTPConnection", "install_chat", "serve_chat"]

health_blueprint = Blueprint("chat_health", __name__)


@health_blueprint.get("/healthz")
async def healthz() -> Response:
    """200 ``{"status": "ok", "live": n}``; 503 problem while shutting down."""
    service = get_service()
    if service.draining:
        return problem(503, "Shutting down", "the server is shutting down", type=SHUTTING_DOWN)
    return json_response(
        {"status": "ok", "live": len(service.agents.running) + len(service.turns.mover.moving)}
    )


class ChatAwareHTTPConnection(TurnAwareHTTPConnection):
    """The runner's turn-aware connection, also settling chat turns whose body never
    started (the client left between the route and the first byte)."""

    async def __call__(self, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        try:
            await super().__call__(receive, send)
        finally:
            pending: list[RelayedRun] = self.scope.get(PENDING_RUNS, [])  # type: ignore[assignment]
            if pending:
                with trio.CancelScope(shield=True):
                    for turn in pending:
                        await turn.abandon()


def install_chat(app: QuartTrio, service: ChatService) -> None:
    """Mount the chat backend on ``app``: its routes, CORS, the
    connection class that gives back turns whose body never started, the shutdown
    hook, ``GET /readyz``, and ``GET /healthz`` unless a runner serves it
    (``service.runner is None``)."""
    if service.runner is None:
        app.register_blueprint(health_blueprint)
    settings = service.settings
    runner_limit = service.runner.settings.max_body_bytes if service.runner else 0
    # Bodies are streamed and bounded per route; this only has to let them through.
    app.config["MAX_CONTENT_LENGTH"] = max(
        runner_limit,
        settings.max_json_bytes,
        settings.max_upload_bytes + (settings.max_upload_files + 1) * PART_OVERHEAD,
        settings.max_results_bytes + (settings.max_results_files + 1) * PART_OVERHEAD,
        largest_snapshot_body(settings),
    )
    app.extensions[CHAT_EXTENSION] = service
    app.asgi_http_class = ChatAwareHTTPConnection
    api = (
        chat_blueprint,
        stream_blueprint,
        workspace_blueprint,
        ui_blueprint,
        agents_blueprint,
        push_blueprint,
        push_ack_blueprint,
    )
    install_cors(app, settings.cors_origins, api)
    for blueprint in (*api, callbacks_blueprint, snapshots_blueprint, readiness_blueprint):
        app.register_blueprint(blueprint)

    @app.after_serving
    async def _shutdown_chat() -> None:
        await service.shutdown()


async def serve_chat(
    app: QuartTrio,
    config: Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the log mover, serve ``app`` until ``shutdown_trigger`` returns, then drain.

    Once listening (the embedded sessions restored), turns whose lock expired and
    that no log mover can settle are settled as lost (:meth:`ChatService.sweep`),
    and again every ``sweep_interval``. Draining: embedded turns end with
    ``error{code:"shutdown"}`` and settle (their messages persisted, their locks
    released), then the embedded runner shuts down (every container reaped), then
    Hypercorn closes. ``task_status.started`` gets the bound addresses.
    Cancellation: Hypercorn stops at once; containers are still reaped.
    """
    service = get_service(app)

    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)

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

        binds: list[str] = await nursery.start(serve_then_stop_sweeping)
        if service.bound_url is None and binds:
            service.bound_url = _callback_url(binds[0])
        await service.turns.sweep_logged()
        nursery.start_soon(service.turns.sweep_periodically)
        task_status.started(binds)


def _callback_url(bind: str) -> str:
    """The bound address as a URL sandboxes on this host can call."""
    url = bind.rstrip("/")
    for wildcard in ("://0.0.0.0:", "://[::]:"):
        url = url.replace(wildcard, "://127.0.0.1:")
    return url
