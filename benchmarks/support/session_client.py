"""Session readers for tests and benchmarks: SSE, NDJSON (raw HTTP/1.1 over h11) and
WebSocket (trio-websocket), each able to stop at any byte and resume from its cursor.

A :class:`ReadResult` holds the *complete* chunks a connection delivered (each an
envelope line with its ``\\n``), the cursor after them, and whether the stream told
the reader the session ended (SSE/WebSocket ``closed`` control, NDJSON: the terminal
line followed by EOF). Lean on purpose: 1000 of them run at once in one process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

import h11
import msgspec
import trio
import trio_websocket

from sandstream.core.sse_parser import Comment, ServerSentEvent, SSEParser

__all__ = ["ReadResult", "Transport", "read_session"]

Transport = Literal["sse", "ndjson", "ws", "ws-batch"]
"""``ws-batch``: the WebSocket with ``?batch=`` (binary NDJSON messages of whole chunks)."""

WS_BATCH_BYTES = 4096
"""``read_session``'s default ``batch_bytes``: small, so that a fast session's reads
are cut into several messages."""


@dataclass
class ReadResult:
    """What one connection delivered."""

    status: int = 0
    chunks: list[bytes] = field(default_factory=list)
    cursor: int = 0
    closed: bool = False
    up_to_date: int = 0
    """``upToDate`` control events seen (SSE/WebSocket)."""
    comments: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    """The raw body (non-200 answers)."""
    last: bytes = b""
    """The last chunk, when they go to ``on_chunk`` instead of ``chunks``."""


class _Control(msgspec.Struct):
    cursor: int
    upToDate: bool = False
    streamClosed: bool = False
    gone: bool = False


def _is_terminal(line: bytes) -> bool:
    kind = msgspec.json.decode(line).get("type")
    return kind in ("result", "error")


async def read_session(
    url: str,
    session_id: str,
    token: str,
    transport: Transport,
    cursor: int,
    *,
    budget: int | None = None,
    on_chunk: Callable[[int, bytes], None] | None = None,
    use_last_event_id: bool = False,
    until_up_to_date: bool = False,
    batch_bytes: int = WS_BATCH_BYTES,
) -> ReadResult:
    """Read the session from ``cursor`` until the end, or until ``budget`` bytes (HTTP)
    or messages (WebSocket) have arrived, or (``until_up_to_date``, SSE/WebSocket) it
    says the reader caught up: then disconnect, whatever is in flight. ``on_chunk``
    is called for each chunk (which is then not kept in ``chunks``)."""
    if transport in ("ws", "ws-batch"):
        batch = batch_bytes if transport == "ws-batch" else None
        return await _read_ws(
            url, session_id, token, cursor, batch, budget, on_chunk, until_up_to_date
        )
    return await _read_http(
        url,
        session_id,
        token,
        transport,
        cursor,
        budget,
        on_chunk,
        use_last_event_id,
        until_up_to_date,
    )


async def _read_http(
    url: str,
    session_id: str,
    token: str,
    transport: Transport,
    cursor: int,
    budget: int | None,
    on_chunk: Callable[[int, bytes], None] | None,
    use_last_event_id: bool,
    until_up_to_date: bool,
) -> ReadResult:
    result = ReadResult(cursor=cursor)
    sse = transport == "sse"
    path = f"/sessions/{session_id}/stream"
    extra: dict[str, str] = {}
    if sse and use_last_event_id:
        extra["Last-Event-ID"] = str(cursor)
    else:
        path += f"?cursor={cursor}"
    accept = "text/event-stream" if sse else "application/x-ndjson"
    parts = urlsplit(url)
    stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
    conn = h11.Connection(h11.CLIENT)
    headers = [
        ("Host", parts.netloc),
        ("Authorization", f"Bearer {token}"),
        ("Accept", accept),
        *extra.items(),
    ]
    parser: SSEParser[ServerSentEvent | Comment] = SSEParser(include_comments=True)
    pending = b""

    def handle_events() -> bool:
        """Process what h11 has; True at the end of the response."""
        nonlocal pending
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return False
            if isinstance(event, h11.Response):
                result.status = event.status_code
                result.headers = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                if result.status != 200:
                    result.body += bytes(event.data)
                else:
                    pending = _take(bytes(event.data), result, parser, sse, pending, on_chunk)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                last = result.chunks[-1] if result.chunks else result.last
                if not sse and last and _is_terminal(last):
                    result.closed = True
                return True

    received = 0
    try:
        await stream.send_all(conn.send(h11.Request(method="GET", target=path, headers=headers)))
        await stream.send_all(conn.send(h11.EndOfMessage()))
        while True:
            data = await stream.receive_some(65536)
            if budget is not None and received + len(data) >= budget:
                conn.receive_data(data[: budget - received])
                handle_events()
                return result  # disconnect here: mid-stream, maybe mid-frame
            received += len(data)
            conn.receive_data(data)
            if handle_events() or (until_up_to_date and result.up_to_date):
                return result
    finally:
        await stream.aclose()


def _take(
    data: bytes,
    result: ReadResult,
    parser: SSEParser[ServerSentEvent | Comment],
    sse: bool,
    pending: bytes,
    on_chunk: Callable[[int, bytes], None] | None,
) -> bytes:
    if not sse:
        pending += data
        end = pending.rfind(b"\n")
        if end < 0:
            return pending
        _deliver_lines(result, pending[: end + 1], on_chunk)
        return pending[end + 1 :]
    for item in parser.feed(data):
        if isinstance(item, Comment):
            result.comments.append(item.text)
        elif item.event == "control":
            control = msgspec.json.decode(item.data, type=_Control)
            result.up_to_date += control.upToDate
            result.closed = result.closed or control.streamClosed
        else:
            line = item.data.encode() + b"\n"
            cursor = int(item.id)
            assert cursor == result.cursor + 1, (cursor, result.cursor)
            result.cursor = cursor
            _deliver(result, line, on_chunk)
    return b""


async def _read_ws(
    url: str,
    session_id: str,
    token: str,
    cursor: int,
    batch: int | None,
    budget: int | None,
    on_chunk: Callable[[int, bytes], None] | None,
    until_up_to_date: bool,
) -> ReadResult:
    result = ReadResult(cursor=cursor, status=101)
    ws_url = url.replace("http://", "ws://", 1) + f"/sessions/{session_id}/ws?cursor={cursor}"
    if batch is not None:
        ws_url += f"&batch={batch}"
    async with trio_websocket.open_websocket_url(
        ws_url, extra_headers=[(b"Authorization", f"Bearer {token}".encode())]
    ) as ws:
        count = 0
        while budget is None or count < budget:
            try:
                message = await ws.get_message()
            except trio_websocket.ConnectionClosed:
                return result
            count += 1
            if isinstance(message, bytes):  # a batch: whole chunks, NDJSON
                assert batch is not None and message.endswith(b"\n"), message[-80:]
                assert len(message) <= batch or message.count(b"\n") == 1, len(message)
                _deliver_lines(result, message, on_chunk)
                continue
            data = message.encode()
            if data.startswith(b'{"type":"control"'):
                control = msgspec.json.decode(data, type=_Control)
                result.up_to_date += control.upToDate
                result.closed = result.closed or control.streamClosed
                if until_up_to_date and control.upToDate:
                    return result
                continue
            result.cursor += 1
            _deliver(result, data + b"\n", on_chunk)
    return result


def _deliver_lines(
    result: ReadResult, lines: bytes, on_chunk: Callable[[int, bytes], None] | None
) -> None:
    """Each ``\n``-terminated line of ``lines`` as a chunk (a CR inside one is JSON
    whitespace, not a line break)."""
    for line in lines[:-1].split(b"\n"):
        result.cursor += 1
        _deliver(result, line + b"\n", on_chunk)


def _deliver(
    result: ReadResult, line: bytes, on_chunk: Callable[[int, bytes], None] | None
) -> None:
    if on_chunk is None:
        result.chunks.append(line)
    else:
        on_chunk(result.cursor, line)
        result.last = line
