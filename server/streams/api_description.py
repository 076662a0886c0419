"""The OpenAPI description of the Durable Streams route (:mod:`.routes`): one
:class:`~sandstream.server.http.Operation` per method of ``/v1/stream/{name}``."""

from __future__ import annotations

from typing import Final

from sandstream.server.http import RUNNER_TOKEN, Content, Operation, Operations

__all__ = ["STREAMS_OPERATIONS"]

_ANY: Final = Content("*/*")
_ENDPOINT: Final = "streams.stream_route"
_READ_QUERY: Final = {
    "offset": "Read after this offset (-1: from the start, now: the tail).",
    "live": "long-poll or sse: wait for what comes next.",
    "cursor": "The Stream-Cursor of the previous read (for caches).",
}

STREAMS_OPERATIONS: Final[Operations] = {
    (_ENDPOINT, "PUT"): Operation(
        "Create (or fork) a stream; its initial bytes are the body.",
        {200: None, 201: None},
        security=(RUNNER_TOKEN,),
        body=_ANY,
        problems=(400, 404, 405, 409, 413),
    ),
    (_ENDPOINT, "POST"): Operation(
        "Append to (or close) a stream; idempotent producers with Producer-* headers.",
        {200: None, 204: None},
        security=(RUNNER_TOKEN,),
        body=_ANY,
        problems=(400, 403, 404, 405, 409, 413),
    ),
    (_ENDPOINT, "GET"): Operation(
        "Read a stream: catch-up, long-poll or SSE.",
        {200: _ANY, 204: None},
        security=(RUNNER_TOKEN,),
        problems=(400, 404, 410),
        query=_READ_QUERY,
    ),
    (_ENDPOINT, "HEAD"): Operation(
        "A stream's metadata, in headers.",
        {200: None},
        security=(RUNNER_TOKEN,),
        problems=(404,),
    ),
    (_ENDPOINT, "DELETE"): Operation(
        "Delete a stream.", {204: None}, security=(RUNNER_TOKEN,), problems=(404, 405)
    ),
}
