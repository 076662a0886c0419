"""The runner blueprint: ``POST /stream`` and ``GET /healthz``.

``POST /stream``: ``Authorization: Bearer <token>``, a JSON
:class:`~sandstream.core.schemas.Dispatch` → ``200 application/x-ndjson``, the
container's envelope line by line (docs/architecture.md, "HTTP surface"). Bad input is
refused with problem JSON before the 200 (401, 408, 413, 422; 503 at capacity or
shutting down); anything that goes wrong after it arrives as the stream's terminal
``error`` line. The body is a :class:`TurnBody`: a client disconnect cancels it, and
the container is stopped and reaped before the response task ends.
"""

from __future__ import annotations

from functools import partial
from types import TracebackType
from typing import Any, Final

import msgspec
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable
from quart import Blueprint, Quart, Response, current_app, request
from quart.wrappers.response import ResponseBody

from sandstream.core import Dispatch
from sandstream.server.http import (
    RUNNER_REALM,
    SHUTTING_DOWN,
    HTTPConnection,
    abort_scope_connection,
    check_bearer,
    problem,
    read_json,
    unauthorized,
)

from .admission import Runner
from .turn import TurnStream

__all__ = [
    "NDJSON_CONTENT_TYPE",
    "RUNNER_EXTENSION",
    "TurnAwareHTTPConnection",
    "TurnBody",
    "get_runner",
    "install_runner",
    "runner_blueprint",
]

NDJSON_CONTENT_TYPE: Final = "application/x-ndjson"
RUNNER_EXTENSION: Final = "sandstream.runner"
_PENDING_TURNS: Final = "sandstream.pending_turns"

runner_blueprint = Blueprint("runner", __name__)


def get_runner(app: Quart | None = None) -> Runner:
    """The :class:`Runner` installed on ``app`` (default: the current app)."""
    target = app if app is not None else current_app
    runner: Runner = target.extensions[RUNNER_EXTENSION]
    return runner


def install_runner(app: Quart, runner: Runner) -> None:
    """Mount the runner on ``app``: blueprint, turn-aware connections, shutdown hook.

    The app's ``asgi_http_class`` becomes :class:`TurnAwareHTTPConnection`,
    ``before_serving`` starts the runner's warm pool (if it has one) in the app's
    nursery, and ``after_serving`` shuts the runner down (every container reaped
    before exit, the pool's too).
    """
    app.extensions[RUNNER_EXTENSION] = runner
    app.asgi_http_class = TurnAwareHTTPConnection
    app.register_blueprint(runner_blueprint)

    @app.before_serving
    async def _start_pool() -> None:
        if runner.pool is not None:
            await app.nursery.start(runner.pool.serve)  # type: ignore[attr-defined]

    @app.after_serving
    async def _shutdown_runner() -> None:
        await runner.shutdown()


class TurnBody(ResponseBody):
    """A streaming response body that is one turn: ``async with`` opens its nursery."""

    def __init__(self, turn: TurnStream) -> None:
        self.turn = turn

    async def __aenter__(self) -> TurnStream:
        return await self.turn.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.turn.__aexit__(exc_type, exc, tb)


class TurnAwareHTTPConnection(HTTPConnection):
    """The server's HTTP connection (:mod:`sandstream.server.http.asgi`), giving back
    turns whose body never started.

    The route admits a turn (takes a container slot) before Quart sends the response;
    if the client goes away in between, the body is never entered. Such turns are
    discarded when the connection's handling ends.
    """

    async def __call__(self, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        try:
            await super().__call__(receive, send)
        finally:
            pending: list[TurnStream] = self.scope.get(_PENDING_TURNS, [])  # type: ignore[assignment]
            for turn in pending:
                turn.discard()


@runner_blueprint.post("/stream")
async def stream() -> Response:
    """Run one turn in a fresh container and stream its envelope as NDJSON."""
    runner = get_runner()
    settings = runner.settings
    if not check_bearer(request.headers.get("Authorization"), settings.token):
        return unauthorized(
            "POST /stream needs the runner token: Authorization: Bearer <token>",
            RUNNER_REALM,
        )
    dispatch = await read_json(Dispatch, settings.max_body_bytes)
    scope: dict[str, Any] = request.scope  # type: ignore[assignment]
    turn = runner.open_turn(  # RunnerUnavailableError: its own 503 problem
        dispatch,
        abort_client=partial(abort_scope_connection, scope),
        cancel_outcome="client_disconnected",
    )
    scope.setdefault(_PENDING_TURNS, []).append(turn)
    response = Response(TurnBody(turn), status=200, content_type=NDJSON_CONTENT_TYPE)
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.headers["X-Turn-Id"] = turn.id
    response.timeout = None  # Quart's RESPONSE_TIMEOUT would cut the stream; ours is runtime_cap
    return response


@runner_blueprint.get("/healthz")
async def healthz() -> Response:
    """200 ``{"status": "ok", "live": n, "max_live": m}``; 503 problem while shutting down."""
    runner = get_runner()
    if runner.draining:
        return problem(
            503,
            "Runner shutting down",
            "the runner is shutting down",
            type=SHUTTING_DOWN,
            headers={"Retry-After": str(runner.settings.retry_after)},
        )
    payload = {"status": "ok", "live": runner.live, "max_live": runner.settings.max_live}
    return Response(msgspec.json.encode(payload), content_type="application/json")
