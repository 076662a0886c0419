"""The Durable Streams blueprint: ``/v1/stream/{path}``, PUT, POST, GET, HEAD, DELETE.

Every request needs the runner token (``Authorization: Bearer <token>``). The protocol
is durable-streams' PROTOCOL.md: create (and fork) with PUT, append and close with
POST (idempotent producers, ``Stream-Seq``), read with GET (catch-up, ``live=long-poll``,
``live=sse``), metadata with HEAD. Errors are problem JSON with the protocol's status and
headers (each :mod:`.errors` says its own); every answer says ``X-Content-Type-Options:
nosniff``. A live read ends when its client leaves, the stream is deleted, or the
server shuts down. Plain appends are answered below Quart (:mod:`.raw_append`); the
ones it leaves (no ``Content-Length``, no token, ...) come here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import trio
from quart import Blueprint, Quart, Response, current_app, request
from werkzeug.datastructures import Headers

from sandstream.server.http import (
    BODY_LIMITS,
    RAW_ROUTES,
    RUNNER_REALM,
    BadRequestError,
    check_bearer,
    problem,
    unauthorized,
)

from .answers import append, with_common_headers
from .cursors import response_cursor
from .errors import (
    PROBLEM_TYPE,
    InvalidStreamRequestError,
    StreamGoneError,
    StreamNotFoundError,
)
from .follow import wait_beyond
from .headers import (
    DEFAULT_CONTENT_TYPE,
    closed_flag,
    expires_at,
    sub_offset,
    ttl_seconds,
)
from .jsonmode import json_body
from .offsets import BEGINNING, NOW, format_offset, parse_offset, parse_read_offset
from .raw_append import RawAppends
from .settings import StreamSettings
from .sse import sse_encoding
from .sse_body import SSEBody
from .store import StreamStore
from .stream import Stream, StreamConfig

__all__ = ["STREAMS_EXTENSION", "STREAM_PREFIX", "Streams", "get_streams", "install_streams"]

STREAMS_EXTENSION: Final = "sandstream.streams"
STREAM_PREFIX: Final = "/v1/stream/"
_RULE: Final = STREAM_PREFIX + "<path:name>"
_CACHEABLE: Final = "private, max-age=60, stale-while-revalidate=300"
_PREFLIGHT_HEADERS: Final = {
    "Access-Control-Allow-Methods": "GET, HEAD, PUT, POST, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": (
        "Authorization, Content-Type, If-None-Match, Stream-Seq, Stream-TTL, "
        "Stream-Expires-At, Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, "
        "Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset"
    ),
    "Access-Control-Max-Age": "600",
}

streams_blueprint = Blueprint("streams", __name__)


class Streams:
    """What the blueprint serves: the store (run by its owner), its settings, the token,
    and the path prefixes of streams only the server writes (``reserved``)."""

    def __init__(
        self,
        settings: StreamSettings,
        store: StreamStore,
        token: str | None,
        reserved: tuple[str, ...] = (),
    ) -> None:
        self.settings = settings
        self.store = store
        self.token = token
        self.reserved = reserved


def get_streams(app: Quart | None = None) -> Streams:
    """The :class:`Streams` installed on ``app`` (default: the current app)."""
    streams: Streams = (app or current_app).extensions[STREAMS_EXTENSION]
    return streams


def install_streams(app: Quart, streams: Streams) -> None:
    """Mount ``/v1/stream/`` on ``app``, serving ``streams`` (whose store its owner runs:
    the sessions)."""
    app.extensions[STREAMS_EXTENSION] = streams
    app.config.setdefault(BODY_LIMITS, {})[STREAM_PREFIX] = streams.settings.max_append_bytes
    app.config.setdefault(RAW_ROUTES, {})[STREAM_PREFIX] = RawAppends(
        streams.store,
        streams.token,
        streams.reserved,
        STREAM_PREFIX,
        streams.settings.max_append_bytes,
        route=_RULE,
    )
    app.register_blueprint(streams_blueprint)


@streams_blueprint.after_request
async def _common_headers(response: Response) -> Response:
    return with_common_headers(response)


# -- the route -------------------------------------------------------------------------


async def stream_route(name: str) -> Response:
    """One stream's every method (see the module docstring)."""
    if request.method == "OPTIONS":  # a CORS preflight: it never carries the token
        return Response(b"", status=204, headers=_PREFLIGHT_HEADERS)
    streams = get_streams()
    if not check_bearer(request.headers.get("Authorization"), streams.token):
        raise BadRequestError(
            unauthorized(
                "Durable Streams need the runner token: Authorization: Bearer <token>", RUNNER_REALM
            )
        )
    path = STREAM_PREFIX + name
    if len(path) > streams.settings.max_path_chars:
        raise InvalidStreamRequestError(
            f"a stream's path is at most {streams.settings.max_path_chars} characters"
        )
    method = request.method
    if method in ("PUT", "POST", "DELETE") and path.startswith(streams.reserved):
        return problem(
            405,
            "Method not allowed",
            "this stream is written by the server alone: read it",
            type=PROBLEM_TYPE + "read-only",
            headers={"Allow": "GET, HEAD, OPTIONS"},
        )
    if method == "PUT":
        return await _create(streams, path)
    if method == "POST":
        return await _append(streams, path)
    if method == "DELETE":
        await streams.store.delete(path)
        return Response(b"", status=204)
    if method == "HEAD":
        return _head(streams.store.get(path))
    return await _read(streams, path)


streams_blueprint.add_url_rule(
    _RULE,
    view_func=stream_route,
    methods=["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"],
    provide_automatic_options=False,
)


# -- create, append, head ------------------------------------------------------------------


async def _create(streams: Streams, path: str) -> Response:
    headers = request.headers
    closed = closed_flag(headers.get("Stream-Closed"))
    ttl = ttl_seconds(headers.get("Stream-TTL"))
    expiry = expires_at(headers.get("Stream-Expires-At"))
    if ttl is not None and expiry is not None:
        raise InvalidStreamRequestError("give Stream-TTL or Stream-Expires-At, not both")
    fork_from = headers.get("Stream-Forked-From")
    fork_offset = headers.get("Stream-Fork-Offset")
    fork_sub = headers.get("Stream-Fork-Sub-Offset")
    if fork_from is None and (fork_offset is not None or fork_sub is not None):
        raise InvalidStreamRequestError("Stream-Fork-Offset needs Stream-Forked-From")
    content_type = headers.get("Content-Type") or ("" if fork_from else DEFAULT_CONTENT_TYPE)
    config = StreamConfig(
        content_type,
        ttl,
        expiry,
        fork_from=None if fork_from is None else _source_path(fork_from),
        fork_offset=None if fork_offset is None else parse_offset(fork_offset.strip()),
        fork_sub_offset=sub_offset(fork_sub),
    )
    body = await request.get_data(cache=False, as_text=False, parse_form_data=False)
    stream, created = await streams.store.create(path, config, body, closed=closed)
    response = Response(b"", status=201 if created else 200)
    response.headers.update(_stream_headers(stream))
    if created:
        response.headers["Location"] = f"{request.scheme}://{request.host}{path}"
    return response


def _source_path(value: str) -> str:
    """A ``Stream-Forked-From`` value as a stream path (a full URL's path too)."""
    text = value.strip()
    if "://" in text:
        text = "/" + text.split("://", 1)[1].partition("/")[2]
    if not text.startswith(STREAM_PREFIX):
        raise StreamNotFoundError(f"no stream at {value!r} to fork")
    return text


async def _append(streams: Streams, path: str) -> Response:
    body = await request.get_data(cache=False, as_text=False, parse_form_data=False)
    return await append(streams.store, path, request.headers, body)


def _stream_headers(stream: Stream) -> Headers:
    headers = Headers()
    headers["Content-Type"] = stream.content_type
    headers["Stream-Next-Offset"] = format_offset(stream.tail)
    if stream.closed:
        headers["Stream-Closed"] = "true"
    return headers


def _head(stream: Stream) -> Response:
    response = Response(b"", status=200)
    response.headers.update(_stream_headers(stream))
    config = stream.config
    if config.ttl is not None:
        response.headers["Stream-TTL"] = str(config.ttl)
    if config.expires_at is not None:
        moment = datetime.fromtimestamp(config.expires_at, UTC)
        response.headers["Stream-Expires-At"] = moment.isoformat().replace("+00:00", "Z")
    response.headers["Cache-Control"] = "no-store"
    return response


# -- reads ---------------------------------------------------------------------------------


async def _read(streams: Streams, path: str) -> Response:
    store = streams.store
    stream = store.get(path)
    args = request.args
    offsets = args.getlist("offset")
    if len(offsets) > 1:
        raise InvalidStreamRequestError("give one offset parameter")
    offset = parse_read_offset(offsets[0] if offsets else None)
    live = args.get("live")
    if live not in (None, "long-poll", "sse"):
        raise InvalidStreamRequestError("live is long-poll or sse")
    if live is not None and not offsets:
        raise InvalidStreamRequestError(f"live={live} needs an offset")
    stream.touch()
    if offset == NOW:
        position = stream.tail
    elif offset == BEGINNING:
        position = store.first_position(stream)
    else:
        position = offset
        if position < store.first_position(stream):
            raise StreamGoneError("the offset is below what the stream retains")
    if live == "sse":
        return _sse(streams, stream, position)
    if live == "long-poll":
        return await _long_poll(streams, stream, position)
    if offset == NOW:
        response = Response(b"[]" if stream.json else b"", status=200)
        response.headers.update(_stream_headers(stream))
        response.headers["Stream-Up-To-Date"] = "true"
        response.headers["Cache-Control"] = "no-store"
        return response
    return await _catch_up(streams, stream, position, cursor=None)


async def _catch_up(
    streams: Streams, stream: Stream, position: int, *, cursor: str | None
) -> Response:
    chunk = await streams.store.read(stream, position, streams.settings.read_bytes)
    up_to_date = chunk.next >= stream.tail
    closed = stream.closed and up_to_date
    etag = f'"{stream.key}:{position}:{chunk.next}{":c" if closed else ""}"'
    if cursor is None and etag in _if_none_match():
        response = Response(b"", status=304)
        response.headers["ETag"] = etag
        return response
    body = json_body(chunk.payload) if stream.json else chunk.payload
    response = Response(body, status=200)
    response.headers["Content-Type"] = stream.content_type
    response.headers["Stream-Next-Offset"] = format_offset(chunk.next)
    response.headers["ETag"] = etag
    if up_to_date:
        response.headers["Stream-Up-To-Date"] = "true"
    if closed:
        response.headers["Stream-Closed"] = "true"
    if cursor is not None:
        response.headers["Stream-Cursor"] = cursor
    response.headers["Cache-Control"] = _CACHEABLE if chunk.payload else "no-store"
    return response


def _if_none_match() -> list[str]:
    value = request.headers.get("If-None-Match")
    return [] if not value else [tag.strip() for tag in value.split(",")]


async def _long_poll(streams: Streams, stream: Stream, position: int) -> Response:
    cursor = response_cursor(request.args.get("cursor"))
    if position == stream.tail and not stream.closed:
        await wait_beyond(
            stream, position, trio.current_time() + streams.settings.long_poll_timeout
        )
        if stream.removed or stream.deleted:
            streams.store.get(stream.path)  # raises: 404 or 410
    if position < stream.tail:
        response = await _catch_up(streams, stream, position, cursor=cursor)
        response.timeout = None
        return response
    response = Response(b"", status=204)
    response.headers["Stream-Next-Offset"] = format_offset(position)
    response.headers["Stream-Up-To-Date"] = "true"
    response.headers["Cache-Control"] = "no-store"
    if stream.closed:
        response.headers["Stream-Closed"] = "true"
    else:
        response.headers["Stream-Cursor"] = cursor
    return response


def _sse(streams: Streams, stream: Stream, position: int) -> Response:
    encoding = sse_encoding(stream.content_type)
    body = SSEBody(
        streams.store,
        streams.settings,
        stream,
        position,
        request.args.get("cursor"),
        request.scope,
    )
    response = Response(body, status=200, content_type="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    if encoding == "base64":
        response.headers["Stream-SSE-Data-Encoding"] = "base64"
    response.timeout = None
    return response
