"""What the stream benchmark's clients put on the wire and read off it, without a library.

- :func:`payload`: the bytes of one append, which name their stream, their sequence
  number and a send time, so that a reader can check every byte it got, in order;
- :func:`request`: one HTTP/1.1 request;
- :class:`ResponseParser`: HTTP/1.1 responses on one keep-alive connection, fed as
  bytes arrive (``Content-Length``, chunked, or no body);
- :class:`SSESplitter`: a ``text/event-stream`` body cut into events.

The clients run thousands of connections in one process, so all of this is a few
slices per received block. Bad input (a malformed response, an event split where it
may not be) raises :class:`WireError`; nothing here blocks or does I/O.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final

__all__ = [
    "HEADER_BYTES",
    "MAX_PAYLOAD",
    "Body",
    "End",
    "Head",
    "ResponseParser",
    "SSEEvent",
    "SSESplitter",
    "WireError",
    "payload",
    "payload_fields",
    "request",
]

HEADER_BYTES: Final = 41
"""A payload's leading fields: ``SSSSSS:QQQQQQQQQQQQ:TTTTTTTTTTTTTTTTTTTT|``."""
_FILL: Final = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ" * 1100
"""Printable, no line break: a payload is valid text for a ``text/plain`` stream."""
MAX_PAYLOAD: Final = HEADER_BYTES + len(_FILL)
_NO_BODY: Final = frozenset({204, 304})
_UNTIL_CLOSE: Final = sys.maxsize
"""The bytes left of a body that runs until the peer closes: more than ever come."""


class WireError(Exception):
    """What came over the wire is not what HTTP/1.1, SSE or the payload format allow."""


def payload(stream: int, seq: int, size: int, sent_ns: int = 0) -> bytes:
    """Append ``seq`` of stream number ``stream``, ``size`` bytes (at least
    :data:`HEADER_BYTES`), carrying ``sent_ns`` (``time.monotonic_ns()`` at its send)."""
    head = b"%06d:%012d:%020d|" % (stream, seq, sent_ns)
    fill = size - HEADER_BYTES
    if not 0 <= fill <= len(_FILL):
        raise ValueError(f"a payload is {HEADER_BYTES} to {MAX_PAYLOAD} bytes, not {size}")
    return head + _FILL[:fill]


def payload_fields(data: bytes) -> tuple[int, int, int]:
    """``(stream, seq, sent_ns)`` of a payload's leading fields."""
    try:
        return int(data[0:6]), int(data[7:19]), int(data[20:40])
    except ValueError:
        raise WireError(f"not a payload: {data[:HEADER_BYTES]!r}") from None


def request(
    method: str,
    target: str,
    host: str,
    headers: dict[str, str],
    body: bytes = b"",
) -> bytes:
    """One HTTP/1.1 request on a keep-alive connection, with its body."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass(slots=True)
class Head:
    """A response's status and headers (names lower-cased)."""

    status: int
    headers: dict[str, str]


@dataclass(slots=True)
class Body:
    """The next bytes of a response's body (chunked framing removed)."""

    data: bytes


@dataclass(slots=True)
class End:
    """The response is complete; the connection may carry the next one."""


class ResponseParser:
    """HTTP/1.1 responses read off one connection, one after the other.

    :meth:`feed` takes bytes as they arrive and returns what they complete: a
    :class:`Head`, :class:`Body` pieces, an :class:`End`. Set :attr:`head_request`
    before feeding the answer to a ``HEAD`` (it has no body). :meth:`eof` says the
    peer closed: it ends a body that runs until then, and raises if a response was
    cut short.
    """

    def __init__(self) -> None:
        self.head_request = False
        self._buffer = b""
        self._state = "head"
        self._remaining = 0  # body or chunk bytes still to come
        self._started = False  # bytes of the current response seen

    def feed(self, data: bytes) -> list[Head | Body | End]:
        events: list[Head | Body | End] = []
        buffer = self._buffer + data if self._buffer else data
        self._buffer = b""
        pos = 0
        end = len(buffer)
        while pos < end:
            self._started = True
            state = self._state
            if state in ("body", "chunk", "until-close"):  # until-close: never runs out
                take = min(self._remaining, end - pos)
                events.append(Body(buffer[pos : pos + take] if pos or take < end else buffer))
                pos += take
                self._remaining -= take
                if not self._remaining:
                    if state == "body":
                        self._finish(events)
                    else:
                        self._state = "chunk-crlf"
            elif state == "chunk-crlf":
                if end - pos < 2:
                    break
                if buffer[pos : pos + 2] != b"\r\n":
                    raise WireError("a chunk not followed by CRLF")
                pos += 2
                self._state = "chunk-size"
            elif state == "chunk-size":
                line_end = buffer.find(b"\r\n", pos)
                if line_end < 0:
                    break
                try:
                    size = int(buffer[pos:line_end].split(b";")[0], 16)
                except ValueError:
                    raise WireError(f"a bad chunk size: {buffer[pos:line_end]!r}") from None
                pos = line_end + 2
                self._remaining = size
                self._state = "chunk" if size else "trailers"  # 0: the last chunk
            elif state == "trailers":
                line_end = buffer.find(b"\r\n", pos)
                if line_end < 0:
                    break
                empty = line_end == pos
                pos = line_end + 2
                if empty:
                    self._finish(events)
            else:  # head
                head_end = buffer.find(b"\r\n\r\n", pos)
                if head_end < 0:
                    break
                head = self._head(buffer[pos:head_end])
                pos = head_end + 4
                events.append(head)
                self._frame(head, events)
        self._buffer = buffer[pos:] if pos < end else b""
        return events

    def eof(self) -> list[Head | Body | End]:
        """The peer closed the connection."""
        if self._state == "until-close":
            events: list[Head | Body | End] = []
            self._finish(events)
            return events
        if self._started or self._buffer:
            raise WireError(f"the connection closed inside a response ({self._state})")
        return []

    def _head(self, block: bytes) -> Head:
        lines = block.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise WireError(f"not an HTTP/1.1 status line: {lines[0]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise WireError(f"a bad header line: {line!r}")
            headers[name.strip().lower()] = value.strip()
        return Head(int(parts[1]), headers)

    def _frame(self, head: Head, events: list[Head | Body | End]) -> None:
        if self.head_request or head.status in _NO_BODY or head.status < 200:
            self._finish(events)
        elif "chunked" in head.headers.get("transfer-encoding", "").lower():
            self._state = "chunk-size"
        elif "content-length" in head.headers:
            self._remaining = int(head.headers["content-length"])
            self._state = "body"
            if not self._remaining:
                self._finish(events)
        else:
            self._remaining = _UNTIL_CLOSE
            self._state = "until-close"

    def _finish(self, events: list[Head | Body | End]) -> None:
        events.append(End())
        self._state = "head"
        self._started = False
        self.head_request = False


@dataclass(slots=True)
class SSEEvent:
    """One event: its ``event:`` name (``message`` if none) and its ``data:`` lines
    joined with ``\\n``."""

    name: bytes
    data: bytes


class SSESplitter:
    """A ``text/event-stream`` body, fed in pieces, cut into :class:`SSEEvent` s
    (comments and ``id:``/``retry:`` fields dropped, events without data too).

    Lines must end in LF alone, as both servers measured write them (for the
    ``text/plain`` streams the benchmark reads, whose payloads hold no line break): a
    CR raises :class:`WireError` rather than being read wrong when a CRLF is split
    across feeds.
    """

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[SSEEvent]:
        if b"\r" in data:
            raise WireError("a CR in an event stream (this reader takes LF line ends only)")
        buffer = self._buffer + data if self._buffer else data
        blocks = buffer.split(b"\n\n")
        self._buffer = blocks.pop()
        events = []
        for block in blocks:
            name = b"message"
            lines = []
            for line in block.split(b"\n"):
                field, _, value = line.partition(b":")
                if value.startswith(b" "):
                    value = value[1:]
                if field == b"data":
                    lines.append(value)
                elif field == b"event":
                    name = value
            if lines:
                events.append(SSEEvent(name, b"\n".join(lines)))
        return events
