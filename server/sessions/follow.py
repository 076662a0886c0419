"""One reader of a session: replay from a cursor, then follow live until the end.

:class:`Follow` is an async iterator of :class:`Chunks`, :class:`CaughtUp` and
:class:`KeepAlive` events, used by every transport (SSE, NDJSON, WebSocket)::

    async for event in Follow(session, after=cursor, max_bytes=..., keepalive=15):
        ...

It reads the backlog at its own pace (each read at most ``max_bytes``), says once
each time it has reached the newest chunk of a live session (``Chunks.up_to_date``
on the chunks that got it there, so a live reader gets one write per chunk, or
:class:`CaughtUp` when it had nothing to read),
then waits to be woken by the writer (or for ``keepalive`` seconds: :class:`KeepAlive`).
It stops after the last chunk of an ended session — for a session that ended with a
terminal line, right after that line. No queue is kept per reader: memory per reader
is one batch. Raises :class:`~.session.CursorGoneError` when retention dropped the
chunks it needs next (it never skips). Cancellation: safe at any point; nothing is
held across an ``await``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .session import Session

__all__ = ["CaughtUp", "Chunks", "Follow", "KeepAlive", "ReadEvent"]


@dataclass(frozen=True, slots=True)
class Chunks:
    """Chunks at cursors ``first``, ``first + 1``, …; ``up_to_date``: they are the
    newest of a live session (the reader caught up with them: no :class:`CaughtUp`
    follows)."""

    first: int
    chunks: list[bytes]
    up_to_date: bool = False


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """The reader holds every chunk up to ``cursor``, and the session is still live."""

    cursor: int


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Nothing new for ``keepalive`` seconds."""


ReadEvent = Chunks | CaughtUp | KeepAlive


class Follow:
    """A reader of ``session`` from cursor ``after`` (see the module docstring)."""

    def __init__(self, session: Session, after: int, *, max_bytes: int, keepalive: float) -> None:
        self.session = session
        self.cursor = after
        """The cursor of the last chunk handed out."""
        self._max_bytes = max_bytes
        self._keepalive = keepalive
        self._announced = False

    def __aiter__(self) -> Follow:
        return self

    async def __anext__(self) -> ReadEvent:
        session = self.session
        while True:
            chunks = await session.read(self.cursor, self._max_bytes)
            if chunks:
                first = self.cursor + 1
                self.cursor += len(chunks)
                caught_up = self.cursor == session.last_cursor and not session.ended
                self._announced = caught_up
                return Chunks(first, chunks, caught_up)
            if session.ended:
                raise StopAsyncIteration
            if not self._announced:
                self._announced = True
                return CaughtUp(self.cursor)
            if not await session.wait_beyond(self.cursor, self._keepalive):
                return KeepAlive()
