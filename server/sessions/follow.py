"""One reader of a session: replay from a cursor, then follow live until the end.

:class:`Follow` is an async iterator of :class:`Chunks`, :class:`CaughtUp` and
:class:`KeepAlive` events, used by every transport (SSE, NDJSON, WebSocket)::

    async for event in Follow(session, after=cursor, max_bytes=..., keepalive=15):
        ...

It reads the backlog at its own pace (each read the whole stored runs that fit in
``max_bytes``, a larger run alone), says once
each time it has reached the newest chunk of a live session (``Chunks.up_to_date``
on the chunks that got it there, so a live reader gets one write per chunk, or
:class:`CaughtUp` when it had nothing to read),
then waits to be woken by the writer (or for ``keepalive`` seconds: :class:`KeepAlive`).
It stops after the last chunk of an ended session — for a session that ended with a
terminal line, right after that line. No queue is kept per reader: memory per reader
is one batch. Raises :class:`~.session.CursorGoneError` when retention dropped the
chunks it needs next (it never skips). Cancellation: safe at any point; nothing is
held across an ``await``.

Given ``live`` (how to reach the connection under the reader's response, and its
transport's :data:`~.session.Frame`), a caught-up reader waits in the session's live
set instead (:meth:`Session.join_live`): the writer writes new chunks to that
connection itself, ``Follow.cursor`` moves on without an event, and the reader's task
wakes only for what goes through its transport — the rest of a write its socket did
not take (written here, then reading goes on from the cursor), the session's end, a
keep-alive. The caller must have written every event handed out before it asks for
the next one (an ASGI body iterator has), since the session writes to the same
connection meanwhile. Cancellation: the reader leaves the live set and its
descriptor is closed; a rest being written is finished by Hypercorn (its writes are
shielded).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from sandstream.server.http.raw_connection import RawConnection

from .buffer import Run
from .session import Frame, LiveReader, Session

__all__ = ["CaughtUp", "Chunks", "Follow", "KeepAlive", "Live", "ReadEvent", "SendWatch"]


@dataclass(frozen=True, slots=True)
class Chunks:
    """Consecutive chunks, as the ``runs`` that hold them (the first one cut at the
    reader's cursor); ``up_to_date``: they are the newest of a live session (the reader
    caught up with them: no :class:`CaughtUp` follows). A transport takes them whole
    (:attr:`data`, no split) or one by one (:attr:`chunks`)."""

    runs: list[Run]
    up_to_date: bool = False

    @property
    def first(self) -> int:
        """The cursor of the first chunk."""
        return self.runs[0].first

    @property
    def last(self) -> int:
        """The cursor of the last chunk."""
        return self.runs[-1].last

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    @property
    def data(self) -> bytes:
        """The chunks joined (each a ``\\n``-terminated line)."""
        runs = self.runs
        return runs[0].data if len(runs) == 1 else b"".join(run.data for run in runs)

    @property
    def chunks(self) -> list[bytes]:
        """The chunks, one by one (shared: never to be changed by a caller)."""
        runs = self.runs
        return runs[0].lines if len(runs) == 1 else [c for run in runs for c in run.lines]


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """The reader holds every chunk up to ``cursor``, and the session is still live."""

    cursor: int


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Nothing new for ``keepalive`` seconds."""


ReadEvent = Chunks | CaughtUp | KeepAlive


class SendWatch(Protocol):
    """Told when a write to the client begins and ends (a stall watchdog)."""

    def handed_out(self, now: float) -> None: ...

    def taken(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Live:
    """How a caught-up reader is written to by the session: ``connect`` gives the
    connection under its response (``None``: no such connection, wait as usual),
    ``frame`` its transport's bytes for chunks; ``watch`` hears of the one write
    that may block (the rest of a write the socket did not take at once)."""

    connect: Callable[[], RawConnection | None]
    frame: Frame
    watch: SendWatch | None = None


class Follow:
    """A reader of ``session`` from cursor ``after`` (see the module docstring)."""

    def __init__(
        self,
        session: Session,
        after: int,
        *,
        max_bytes: int,
        keepalive: float,
        live: Live | None = None,
    ) -> None:
        self.session = session
        self.cursor = after
        """The cursor of the last chunk handed out."""
        self._max_bytes = max_bytes
        self._keepalive = keepalive
        self._live = live
        self._announced = False

    def __aiter__(self) -> Follow:
        return self

    async def __anext__(self) -> ReadEvent:
        session = self.session
        while True:
            runs = await session.read_runs(self.cursor, self._max_bytes)
            if runs:
                self.cursor = runs[-1].last
                caught_up = self.cursor == session.last_cursor and not session.ended
                self._announced = caught_up
                return Chunks(runs, caught_up)
            if session.ended:
                raise StopAsyncIteration
            if not self._announced:
                self._announced = True
                return CaughtUp(self.cursor)
            woken = None if self._live is None else await self._wait_live(self._live)
            if woken is None:
                woken = await session.wait_beyond(self.cursor, self._keepalive)
            if not woken:
                return KeepAlive()

    async def _wait_live(self, live: Live) -> bool | None:
        """Wait in the session's live set: True when woken, False after ``keepalive``
        seconds with nothing written, ``None`` if the reader cannot be live."""
        connection = live.connect()
        if connection is None:
            return None
        session = self.session
        try:
            reader = LiveReader(connection, live.frame, self.cursor)
            if not session.join_live(reader):
                return True  # a chunk came, or the end
            try:
                while not reader.woken.is_set():
                    quiet_since = max(reader.joined_at, session.written_at)
                    if trio.current_time() >= quiet_since + self._keepalive:
                        return False
                    with trio.move_on_at(quiet_since + self._keepalive):
                        await reader.woken.wait()
            finally:
                session.leave_live(reader)
                self.cursor = reader.cursor
            if reader.rest:
                if live.watch is not None:
                    live.watch.handed_out(trio.current_time())
                await connection.send(reader.rest)
                if live.watch is not None:
                    live.watch.taken()
            return True
        finally:
            connection.close()
