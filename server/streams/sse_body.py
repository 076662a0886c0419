"""One ``live=sse`` reader's response body: data and control events until the stream
closes, the reader leaves, or the reconnect interval has passed.

Behind, a reader reads the stream (whole appends, ``read_bytes`` a read) and its body
sends each batch as a ``data`` and a ``control`` event. Caught up over HTTP/1.1 (the
fan-out, :mod:`sandstream.server.http.fanout`), it waits in the stream's live set
(:mod:`.live`) instead: the stream offers it each append as it is published, framed
once for every live reader of its encoding (:func:`.sse.live_events`) and written
straight to its socket, waking no task (its socket full, it is woken to write what
its connection queued, and stays live); taken out of the set (its backlog overflowed,
the stream closed or was deleted, an append was too large to offer), it reads on
from what it holds.
Elsewhere it waits for the stream's next change. Cancellation: a reader leaves the
live set; the rest of a write its socket did not take is not sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import trio

from sandstream.server.http import RunFraming, live_connection

from .cursors import interval_cursor, response_cursor
from .follow import Follower, wait_beyond, wait_live
from .live import LiveAppend, LiveReader
from .offsets import format_offset
from .settings import StreamSettings
from .sse import SseEncoding, control_event, data_event, live_events, sse_encoding
from .store import StreamStore
from .stream import Stream

__all__ = ["SSEBody"]

_LIVE: Final[dict[SseEncoding, RunFraming[LiveAppend]]] = {
    "text": RunFraming(lambda append: live_events(append, "text")),
    "json": RunFraming(lambda append: live_events(append, "json")),
    "base64": RunFraming(lambda append: live_events(append, "base64")),
}
"""The live writes of each encoding: an append's events, framed once for all its readers."""


class SSEBody(Follower[bytes]):
    """The events of one ``live=sse`` reader of ``stream`` from ``position`` (an async
    iterator of bytes; see the module docstring). ``cursor``: the one the request
    echoed; ``scope``: its ASGI scope (where the fan-out finds the socket)."""

    def __init__(
        self,
        store: StreamStore,
        settings: StreamSettings,
        stream: Stream,
        position: int,
        cursor: str | None,
        scope: Mapping[str, object],
    ) -> None:
        self._store = store
        self._read_bytes = settings.read_bytes
        self._stream = stream
        self._position = position
        self._cursor = int(response_cursor(cursor))
        """The highest cursor given (or to give first)."""
        self._encoding = sse_encoding(stream.content_type)
        self._scope = scope
        self._deadline = trio.current_time() + settings.sse_reconnect
        self._sent_control = False
        self._done = False

    async def _read(self) -> bytes | None:
        stream = self._stream
        if self._ended() or self._position >= stream.tail:
            return None
        chunk = await self._store.read(stream, self._position, self._read_bytes)
        self._position = chunk.next
        return data_event(chunk.payload, self._encoding) + self._control()

    def _ended(self) -> bool:
        return self._done or self._stream.removed or self._stream.deleted

    def _caught_up(self) -> bytes | None:
        """The control event at the tail: the first, and the one saying it closed."""
        return self._control() if self._stream.closed or not self._sent_control else None

    async def _wait_changed(self) -> bool:
        return await wait_beyond(self._stream, self._position, self._deadline)

    def _timed_out(self) -> None:
        """At the reconnect interval the response ends (the client reconnects)."""

    async def _wait_live(self) -> bool | None:
        """In the live set, unless the reader is not HTTP/1.1 under Hypercorn."""
        async with live_connection(self._scope, _LIVE[self._encoding]) as connection:
            if connection is None:
                return None
            reader = LiveReader(connection, self._position, self._cursor)
            try:
                return await wait_live(self._stream, reader, lambda: self._deadline)
            finally:
                self._position, self._cursor = reader.position, reader.cursor

    def _control(self) -> bytes:
        stream = self._stream
        at_tail = self._position >= stream.tail
        closed = stream.closed and at_tail
        self._sent_control = True
        self._done = closed
        self._cursor = max(self._cursor, interval_cursor())
        return control_event(
            format_offset(self._position),
            cursor=str(self._cursor),
            up_to_date=at_tail,
            closed=closed,
        )
