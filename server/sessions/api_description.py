"""The OpenAPI description of the durable sessions' routes (:mod:`.routes`): one
:class:`~sandstream.server.http.Operation` per endpoint and method."""

from __future__ import annotations

from typing import Final

from sandstream.core import Dispatch
from sandstream.server.http import (
    RUNNER_TOKEN,
    Content,
    Operation,
    Operations,
    json_content,
    shape,
)

from .routes import NDJSON_CONTENT_TYPE, SSE_CONTENT_TYPE, MessageAck, MessageBody
from .session import SessionStatus

__all__ = ["SESSIONS_OPERATIONS"]

CreatedSession = shape(
    "CreatedSession",
    id=str,
    status_url=str,
    stream_url=str,
    ws_url=str,
    message_url=str,
    interrupt_url=str,
)
_CURSOR: Final = {"cursor": "Replay after this chunk id (Last-Event-ID wins)."}
_STATUS: Final = json_content(SessionStatus)

SESSIONS_OPERATIONS: Final[Operations] = {
    ("sessions.create_session", "POST"): Operation(
        "Start a session running the dispatch.",
        {201: json_content(CreatedSession)},
        security=(RUNNER_TOKEN,),
        body=json_content(Dispatch),
        problems=(503,),
    ),
    ("sessions.session_status", "GET"): Operation(
        "The session's state and cursors.",
        {200: _STATUS},
        security=(RUNNER_TOKEN,),
        problems=(404,),
    ),
    ("sessions.session_message", "POST"): Operation(
        "A user message, or the answer to a permission request, for the running agent.",
        {200: json_content(MessageAck)},
        security=(RUNNER_TOKEN,),
        body=json_content(MessageBody),
        problems=(404, 409),
    ),
    ("sessions.session_interrupt", "POST"): Operation(
        "End the session with error{code: interrupted} (idempotent).",
        {200: _STATUS},
        security=(RUNNER_TOKEN,),
        problems=(404,),
    ),
    ("sessions.session_stream", "GET"): Operation(
        "Replay, then follow live until the end: SSE (Accept: text/event-stream) or NDJSON.",
        {
            200: (
                Content(SSE_CONTENT_TYPE, {"type": "string"}),
                Content(NDJSON_CONTENT_TYPE, {"type": "string"}),
            ),
            204: None,
        },
        security=(RUNNER_TOKEN,),
        problems=(404, 409, 410),
        query=_CURSOR,
    ),
    ("sessions.session_ws", "GET"): Operation(
        "A WebSocket: one text message per chunk (batch=N: binary NDJSON), then close.",
        {101: None},
        security=(RUNNER_TOKEN,),
        query={**_CURSOR, "batch": "Binary NDJSON messages of up to N bytes."},
        websocket=True,
    ),
}
