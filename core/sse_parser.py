"""Incremental Server-Sent Events parser, per the WHATWG HTML "event stream interpretation".

Bytes go in with any chunk boundaries; the same events come out whatever the chunking
(UTF-8 with U+FFFD for invalid bytes; lines end at CR, LF or CRLF only; an event not
ended by a blank line is discarded at end of stream). One parser serves a client across
reconnections, as ``EventSource`` does: :meth:`SSEParser.reconnect` keeps the last event
id and the reconnection time and drops the unfinished event.

Bad input: a line over ``max_line_chars`` or an event's data over ``max_data_chars``
raises :class:`SSEParseError` and the parser refuses further input; anything else a
browser ignores (unknown fields, a bad ``retry``, an ``id`` with NUL) is ignored.
"""

from __future__ import annotations

import codecs
import re
from typing import Final, Generic, Literal, TypeVar, cast, overload

import msgspec

from .errors import SSEParseError, SSEParserClosedError

__all__ = [
    "DEFAULT_MAX_DATA_CHARS",
    "DEFAULT_MAX_LINE_CHARS",
    "Comment",
    "SSEParser",
    "ServerSentEvent",
]

DEFAULT_MAX_LINE_CHARS: Final = 1 << 20
DEFAULT_MAX_DATA_CHARS: Final = 16 << 20

_LINE_END: Final = re.compile(r"\r\n|\r|\n")
_ASCII_DIGITS: Final = frozenset("0123456789")


class ServerSentEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One dispatched event.

    ``id`` is the last event id in force when the event was dispatched (it persists
    across events and reconnections, as in a browser); ``retry`` is the reconnection
    time in force (the last valid ``retry:`` field seen so far, or ``None``).
    """

    event: str = "message"
    data: str
    id: str = ""
    retry: int | None = None


class Comment(msgspec.Struct, frozen=True, gc=False):
    """A comment line (``: ping``), text after the colon minus one leading space."""

    text: str


Item = TypeVar("Item", bound=ServerSentEvent | Comment)


class SSEParser(Generic[Item]):
    """Parse an event stream incrementally.

    ``SSEParser()`` yields :class:`ServerSentEvent` items only;
    ``SSEParser(include_comments=True)`` also yields :class:`Comment` items, in stream
    order. ``last_event_id`` and ``retry`` expose the state a reconnecting client
    would use; :meth:`reconnect` starts reading the new connection::

        parser = SSEParser()
        for chunk in first_response:
            handle(parser.feed(chunk))
        parser.reconnect()  # the connection ended: send Last-Event-ID, wait parser.retry
        for chunk in second_response:
            handle(parser.feed(chunk))
    """

    __slots__ = (
        "_comments",
        "_data",
        "_data_chars",
        "_decoder",
        "_done",
        "_event_type",
        "_id_buffer",
        "_last_event_id",
        "_max_data",
        "_max_line",
        "_pending",
        "_pending_chars",
        "_retry",
        "_skip_lf",
    )
    # Per connection, set by _start_stream():
    _decoder: codecs.IncrementalDecoder
    _pending_chars: int
    _skip_lf: bool
    _data_chars: int
    _event_type: str
    _id_buffer: str
    _done: bool

    @overload
    def __init__(
        self: SSEParser[ServerSentEvent],
        *,
        include_comments: Literal[False] = False,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        max_data_chars: int = DEFAULT_MAX_DATA_CHARS,
    ) -> None: ...

    @overload
    def __init__(
        self: SSEParser[ServerSentEvent | Comment],
        *,
        include_comments: bool,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        max_data_chars: int = DEFAULT_MAX_DATA_CHARS,
    ) -> None: ...

    def __init__(
        self,
        *,
        include_comments: bool = False,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        max_data_chars: int = DEFAULT_MAX_DATA_CHARS,
    ) -> None:
        """Raise ``ValueError`` if a bound is not positive."""
        if max_line_chars < 1:
            raise ValueError(f"max_line_chars must be positive, got {max_line_chars}")
        if max_data_chars < 1:
            raise ValueError(f"max_data_chars must be positive, got {max_data_chars}")
        self._comments = include_comments
        self._max_line = max_line_chars
        self._max_data = max_data_chars
        self._last_event_id = ""
        self._retry: int | None = None
        self._pending: list[str] = []
        self._data: list[str] = []
        self._start_stream()

    @property
    def last_event_id(self) -> str:
        """The last event id as of the last dispatch (what ``Last-Event-ID`` would send)."""
        return self._last_event_id

    @property
    def retry(self) -> int | None:
        """The reconnection time in ms from the last valid ``retry:`` field, or ``None``."""
        return self._retry

    @property
    def buffered(self) -> int:
        """Characters held between calls for the partial line and the event's data: at
        most ``max_line_chars + max_data_chars``."""
        return sum(map(len, self._pending)) + sum(map(len, self._data))

    def feed(self, data: bytes) -> list[Item]:
        """Return the items completed by ``data``.

        Raises :class:`SSEParseError` when a line or an event's data exceeds its bound
        (items completed earlier in the same chunk are lost with it), and
        :class:`SSEParserClosedError` after :meth:`close` or a previous error, until
        :meth:`reconnect`.
        """
        if self._done:
            raise SSEParserClosedError("feed() after close() or a parse error")
        return self._process(self._decoder.decode(data))

    def close(self) -> list[Item]:
        """End the stream; an unterminated line and an undispatched event are discarded.

        Always returns ``[]`` (no event can complete without a line end); kept for
        symmetry with :meth:`feed`. Idempotent. :meth:`reconnect` reopens the parser.
        """
        if self._done:
            return []
        self._done = True
        self._pending.clear()
        self._data.clear()
        return []

    def reconnect(self) -> None:
        """Start reading a new connection's stream, as a browser does when it reconnects.

        Kept: :attr:`last_event_id` (the next events carry it until an ``id:`` field
        changes it) and :attr:`retry`. Dropped: the unfinished event (its data, event
        type and an ``id:`` not yet dispatched), a partial line, a pending CR or
        partial UTF-8 sequence; the new stream may start with a BOM again. Allowed at
        any time: mid-stream (the connection was abandoned), after :meth:`close`, or
        after an :class:`SSEParseError`.
        """
        self._start_stream()

    def _start_stream(self) -> None:
        # "utf-8-sig" drops one leading BOM, even one split across chunks.
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._pending.clear()
        self._pending_chars = 0
        self._data.clear()
        self._skip_lf = False
        self._data_chars = 0
        self._event_type = ""
        self._id_buffer = self._last_event_id
        self._done = False

    def _process(self, text: str) -> list[Item]:
        if not text:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return []
        lines = _LINE_END.split(text)
        tail = lines.pop()
        self._skip_lf = text[-1] == "\r"
        out: list[Item] = []
        if lines:
            if self._pending:
                self._pending.append(lines[0])
                lines[0] = "".join(self._pending)
                self._pending.clear()
                self._pending_chars = 0
            for line in lines:
                if len(line) > self._max_line:
                    self._fail_line(len(line))
                self._line(line, out)
        if tail:
            self._pending.append(tail)
            self._pending_chars += len(tail)
            if self._pending_chars > self._max_line:
                self._fail_line(self._pending_chars)
        return out

    def _line(self, line: str, out: list[Item]) -> None:
        if not line:
            self._dispatch(out)
            return
        colon = line.find(":")
        if colon == 0:
            if self._comments:
                text = line[2:] if line.startswith(": ") else line[1:]
                out.append(cast(Item, Comment(text)))
            return
        if colon < 0:
            field, value = line, ""
        else:
            field = line[:colon]
            value = line[colon + 2 :] if line.startswith(" ", colon + 1) else line[colon + 1 :]
        if field == "data":
            self._data_chars += len(value) + 1
            if self._data_chars > self._max_data:
                self._done = True
                raise SSEParseError(f"event data exceeds max_data_chars={self._max_data}")
            self._data.append(value)
        elif field == "event":
            self._event_type = value
        elif field == "id" and "\x00" not in value:
            self._id_buffer = value
        elif field == "retry" and _is_retry(value):
            self._retry = int(value)

    def _dispatch(self, out: list[Item]) -> None:
        self._last_event_id = self._id_buffer
        if self._data:
            event = ServerSentEvent(
                event=self._event_type or "message",
                data="\n".join(self._data),
                id=self._last_event_id,
                retry=self._retry,
            )
            out.append(cast(Item, event))
            self._data.clear()
            self._data_chars = 0
        self._event_type = ""

    def _fail_line(self, length: int) -> None:
        self._done = True
        self._pending.clear()
        self._pending_chars = 0
        raise SSEParseError(f"line of {length}+ chars exceeds max_line_chars={self._max_line}")


def _is_retry(value: str) -> bool:
    # ASCII digits only; 20+ significant digits overflow a browser's integer: ignored.
    return bool(value) and _ASCII_DIGITS.issuperset(value) and len(value.lstrip("0")) < 20
