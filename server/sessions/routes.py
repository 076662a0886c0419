"""The session blueprint: create, read (SSE / NDJSON / WebSocket), status, message, interrupt.

Every route needs the runner token (``Authorization: Bearer <token>``). Errors are
problem JSON: 401, 404 (no such session, or permission request), 409 (a message to an
ended session, a second answer to a permission request), 410 (the cursor is below what
the buffer retains), 413/422 (body; cursor, :mod:`.resume`), 503 (at capacity or
shutting down, with ``Retry-After``), the errors answering for themselves
(:mod:`.errors`) with their members in snake_case. The wire formats are in
:mod:`.wire`; the rules in docs/protocol.md ("Durable sessions").
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import ExitStack
from functools import partial
from types import TracebackType
from typing import Annotated, Final, Literal

import msgspec
import trio
from quart import Blueprint, Quart, Response, current_app, request, websocket
from quart.wrappers.response import ResponseBody
from werkzeug.datastructures import Headers

from sandstream.core import PING, Dispatch, PermissionAnswer
from sandstream.server.http import (
    RUNNER_REALM,
    BadRequestError,
    LiveFraming,
    answer_in_snake_case,
    check_bearer,
    int_query,
    invalid,
    json_response,
    live_connection,
    read_json,
    unauthorized,
)

from .counts import SessionCounts, Transport
from .errors import CursorAheadError, CursorGoneError
from .follow import CaughtUp, Chunks, Follow
from .resume import request_cursor
from .session import Session
from .supervisor import SessionService
from .wire import batch_messages, control_message, ndjson_run, sse_caught_up, sse_control, sse_run

__all__ = [
    "SESSIONS_EXTENSION",
    "get_sessions",
    "install_sessions",
    "sessions_blueprint",
]

log = logging.getLogger("sandstream.sessions")

SESSIONS_EXTENSION: Final = "sandstream.sessions"
SSE_CONTENT_TYPE: Final = "text/event-stream; charset=utf-8"
NDJSON_CONTENT_TYPE: Final = "application/x-ndjson"
MAX_MESSAGE_BODY: Final = 1024 * 1024
MAX_BATCH_BYTES: Final = 64 * 1024 * 1024
"""The largest ``?batch=N`` a WebSocket reader may ask for."""
READ_ONLY_CLOSE: Final = 1008
"""The close code (policy violation) of a WebSocket reader that sent a message."""
_SSE_LIVE: Final = LiveFraming(sse_caught_up)
"""A caught-up SSE reader's live writes: a run's frames and the ``upToDate`` control."""
_NDJSON_LIVE: Final = LiveFraming(ndjson_run)

sessions_blueprint = Blueprint("sessions", __name__)
answer_in_snake_case(sessions_blueprint)


class MessageBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /sessions/{id}/message``: a user message, ``{"text"}`` (``type``
    ``"message"``, the default), or an answer to a permission request,
    ``{"type": "permission", "id", "reply"}``."""

    type: Literal["message", "permission"] = "message"
    text: str | None = None
    id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    reply: Literal["once", "always", "reject"] | None = None

    def inbound(self) -> str | PermissionAnswer:
        """The message's text or the answer; raises :class:`BadRequestError` (422) for
        a body whose fields do not fit its ``type``."""
        if self.type == "message":
            if self.text is None or self.id is not None or self.reply is not None:
                raise BadRequestError(invalid('a message is {"text": "..."}'))
            return self.text
        if self.text is not None or self.id is None or self.reply is None:
            raise BadRequestError(
                invalid(
                    'a permission answer is {"type": "permission", "id": "...", "reply": '
                    '"once" | "always" | "reject"}'
                )
            )
        return PermissionAnswer(id=self.id, reply=self.reply)


class MessageAck(msgspec.Struct, frozen=True):
    """The cursor of the newest chunk when the message was handed to the container."""

    cursor: int


def get_sessions(app: Quart | None = None) -> SessionService:
    """The :class:`SessionService` installed on ``app`` (default: the current app)."""
    target = app if app is not None else current_app
    service: SessionService = target.extensions[SESSIONS_EXTENSION]
    return service


def install_sessions(app: Quart, service: SessionService) -> None:
    """Mount the sessions on ``app``: blueprint, and the service run by the app's lifespan.

    ``before_serving`` starts :meth:`SessionService.run` in the app's nursery (buffer
    opened, sessions restored); ``after_serving`` closes it (live sessions end with
    ``error{code:"shutdown"}``, containers reaped, buffer closed).
    """
    app.extensions[SESSIONS_EXTENSION] = service
    app.register_blueprint(sessions_blueprint)

    @app.before_serving
    async def _start_sessions() -> None:
        await app.nursery.start(service.run)  # type: ignore[attr-defined]

    @app.after_serving
    async def _close_sessions() -> None:
        await service.close()


def _authorize(headers_authorization: str | None) -> None:
    token = get_sessions().runner.settings.token
    if not check_bearer(headers_authorization, token):
        raise BadRequestError(
            unauthorized(
                "the session API needs the runner token: Authorization: Bearer <token>",
                RUNNER_REALM,
            )
        )


def _session(session_id: str) -> Session:
    return get_sessions().get(session_id)  # SessionNotFoundError: its own 404 problem


def _batch_limit() -> int | None:
    """``?batch=N``: the most bytes of chunks per WebSocket message (``None``, or empty:
    a message per chunk); 422 unless an integer from 1 to :data:`MAX_BATCH_BYTES`."""
    args = websocket.args
    if not args.get("batch"):
        return None
    return int_query("batch", 0, minimum=1, maximum=MAX_BATCH_BYTES, args=args)


def _cursor(session: Session, args: Mapping[str, str], headers: Headers) -> int:
    """The cursor to read after (:func:`.resume.request_cursor`; ``0`` by default):
    :class:`~.errors.InvalidCursorError` or :class:`~.errors.CursorAheadError` (422) if
    malformed or past the session's last chunk, :class:`~.errors.CursorGoneError` (410)
    if below what is retained."""
    cursor = request_cursor(args, headers) or 0
    if cursor > session.last_cursor:
        raise CursorAheadError(cursor, session.last_cursor)
    session.check_cursor(cursor)
    return cursor


# -- create, status, message, interrupt --------------------------------------------------


@sessions_blueprint.post("/sessions")
async def create_session() -> Response:
    """Start a session running the dispatch → 201 with its id and URLs."""
    _authorize(request.headers.get("Authorization"))
    service = get_sessions()
    dispatch = await read_json(Dispatch, service.runner.settings.max_body_bytes)
    session = await service.create(dispatch)  # RunnerUnavailableError: its own 503 problem
    base = f"/sessions/{session.id}"
    body = {
        "id": session.id,
        "status_url": f"{base}/status",
        "stream_url": f"{base}/stream",
        "ws_url": f"{base}/ws",
        "message_url": f"{base}/message",
        "interrupt_url": f"{base}/interrupt",
    }
    response = json_response(body, status=201)
    response.headers["Location"] = base
    return response


@sessions_blueprint.get("/sessions/<session_id>/status")
async def session_status(session_id: str) -> Response:
    _authorize(request.headers.get("Authorization"))
    return json_response(_session(session_id).status())


@sessions_blueprint.post("/sessions/<session_id>/message")
async def session_message(session_id: str) -> Response:
    """Hand a user message, or the answer to a permission request, to the running
    agent → 200 ``{"cursor": N}``; 409 if ended or (an answer) answered before, 404
    for a permission request the agent never asked."""
    _authorize(request.headers.get("Authorization"))
    session = _session(session_id)
    inbound = (await read_json(MessageBody, MAX_MESSAGE_BODY)).inbound()
    # Ended, or a permission request never asked or answered before: their own problems.
    if isinstance(inbound, str):
        cursor = await session.send_message(inbound)
    else:
        cursor = await session.answer_permission(inbound)
    return json_response(MessageAck(cursor))


@sessions_blueprint.post("/sessions/<session_id>/interrupt")
async def session_interrupt(session_id: str) -> Response:
    """End the session with ``error{code:"interrupted"}`` → 200 with its status (idempotent)."""
    _authorize(request.headers.get("Authorization"))
    session = _session(session_id)
    await session.interrupt()
    return json_response(session.status())


# -- reads -------------------------------------------------------------------------


class _SSEBody:
    """SSE frames of one reader (an async iterator of bytes; no nursery)."""

    def __init__(self, follow: Follow) -> None:
        self._follow = follow
        self._done = False

    def __aiter__(self) -> _SSEBody:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        follow = self._follow
        try:
            event = await follow.__anext__()
        except StopAsyncIteration:
            self._done = True
            return sse_control(follow.cursor, closed=True)
        except CursorGoneError:
            self._done = True
            return sse_control(follow.cursor, gone=True)
        if isinstance(event, Chunks):
            frames = sse_caught_up if event.up_to_date else sse_run
            return frames(event.first, event.data, event.count)
        if isinstance(event, CaughtUp):
            return sse_control(event.cursor, up_to_date=True)
        return PING


class _NDJSONBody:
    """The chunks of one reader, as they are (an async iterator of bytes)."""

    def __init__(self, follow: Follow) -> None:
        self._follow = follow

    def __aiter__(self) -> _NDJSONBody:
        return self

    async def __anext__(self) -> bytes:
        while True:
            try:
                event = await self._follow.__anext__()
            except CursorGoneError:
                raise StopAsyncIteration from None
            if isinstance(event, Chunks):
                return event.data


class _CountedBody(ResponseBody):
    """A reader's response body, in ``counts`` as a reader of ``transport`` while it is
    sent (a body never sent is never counted)."""

    def __init__(
        self, body: AsyncIterator[bytes], counts: SessionCounts, transport: Transport
    ) -> None:
        self._body = body
        self._reading = partial(counts.reading, transport)
        self._counted = ExitStack()

    async def __aenter__(self) -> _CountedBody:
        self._counted.enter_context(self._reading())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._counted.close()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._body


def _follow(session: Session, cursor: int, framing: LiveFraming | None = None) -> Follow:
    """A reader of ``session`` after ``cursor``; with ``framing``, one whose runs are
    written live to the request's HTTP/1.1 connection while it is caught up."""
    settings = get_sessions().settings
    subscribe = None if framing is None else partial(live_connection, request.scope, framing)
    return Follow(
        session,
        cursor,
        max_bytes=settings.read_bytes,
        keepalive=settings.keepalive,
        subscribe=subscribe,
    )


@sessions_blueprint.get("/sessions/<session_id>/stream")
async def session_stream(session_id: str) -> Response:
    """Replay after ``Last-Event-ID`` (else ``cursor``), then follow live until the end;
    ``204`` for a reader that holds the last chunk of an ended session."""
    _authorize(request.headers.get("Authorization"))
    session = _session(session_id)
    cursor = _cursor(session, request.args, request.headers)
    if session.ended and cursor == session.last_cursor:
        return _at_the_end(session)
    if "text/event-stream" in request.headers.get("Accept", ""):
        follow = _follow(session, cursor, _SSE_LIVE)
        body = _CountedBody(_SSEBody(follow), get_sessions().counts, "sse")
        response = Response(body, status=200, content_type=SSE_CONTENT_TYPE)
    else:
        follow = _follow(session, cursor, _NDJSON_LIVE)
        body = _CountedBody(_NDJSONBody(follow), get_sessions().counts, "ndjson")
        response = Response(body, status=200, content_type=NDJSON_CONTENT_TYPE)
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.headers["Session-Last-Chunk-Id"] = str(session.last_cursor)
    if cursor == session.last_cursor:
        response.headers["Stream-Up-To-Date"] = "true"
    if session.ended:
        response.headers["Stream-Closed"] = "true"
    response.timeout = None  # Quart's RESPONSE_TIMEOUT would cut the stream
    return response


def _at_the_end(session: Session) -> Response:
    """``204``: the reader holds the last chunk of an ended session (an ``EventSource``
    stops reconnecting for good)."""
    response = Response(b"", status=204)
    response.headers["Session-Last-Chunk-Id"] = str(session.last_cursor)
    response.headers["Stream-Closed"] = "true"
    return response


async def _send_chunks(chunks: Chunks, batch: int | None) -> None:
    """``chunks`` as WebSocket messages: a text message each, or binary NDJSON
    messages of up to ``batch`` bytes."""
    if batch is None:
        for chunk in chunks.chunks:
            await websocket.send(chunk[:-1].decode())
    else:
        for message in batch_messages(chunks.data, batch):
            await websocket.send(message)


@sessions_blueprint.websocket("/sessions/<session_id>/ws")
async def session_ws(session_id: str) -> Response | None:
    """One text message per chunk (``?batch=N``: binary NDJSON messages of up to ``N``
    bytes of whole chunks), control messages, closed (1000) after the last chunk;
    read-only: a client message closes it (1008)."""
    try:
        _authorize(websocket.headers.get("Authorization"))
        session = _session(session_id)
        cursor = _cursor(session, websocket.args, websocket.headers)
        batch = _batch_limit()
    except BadRequestError as exc:
        return exc.response
    await websocket.accept()
    with get_sessions().counts.reading("websocket"):
        await _send_until_closed(session, cursor, batch)
    return None


async def _send_until_closed(session: Session, cursor: int, batch: int | None) -> None:
    """The session to the socket, while refusing client messages."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_refuse_client_messages, nursery.cancel_scope)
        await _send_session(_follow(session, cursor), batch)
        nursery.cancel_scope.cancel()


async def _refuse_client_messages(done: trio.CancelScope) -> None:
    """The socket is read-only: the first client message closes it with 1008 (Hypercorn
    closes one over ``MAX_WEBSOCKET_MESSAGE`` bytes with 1009 before it is buffered)."""
    await websocket.receive()
    await websocket.close(READ_ONLY_CLOSE, "read-only: this socket takes no messages")
    done.cancel()


async def _send_session(follow: Follow, batch: int | None) -> None:
    """The session after the reader's cursor, then the closing control message and close."""
    try:
        async for event in follow:
            if isinstance(event, Chunks):
                await _send_chunks(event, batch)
                if event.up_to_date:
                    await websocket.send(control_message(follow.cursor, up_to_date=True))
            elif isinstance(event, CaughtUp):
                await websocket.send(control_message(event.cursor, up_to_date=True))
    except CursorGoneError:
        await websocket.send(control_message(follow.cursor, gone=True))
        await websocket.close(4410, "cursor below retention")
        return
    await websocket.send(control_message(follow.cursor, closed=True))
    await websocket.close(1000, "session ended")
