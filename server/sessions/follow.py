"""One reader of a session: replay from a cursor, then follow live until the end.

:class:`Follow` yields :class:`Chunks` (whole stored runs, ≤ ``max_bytes`` a read),
:class:`CaughtUp` and :class:`KeepAlive` for every transport, holding only its cursor::

    async for event in Follow(session, after=cursor, max_bytes=..., keepalive=15):
        ...

With ``subscribe`` a caught-up reader waits in the live set (writing, when woken
for it, what its subscriber queued); the caller must have written each event before
asking for the next (the subscriber writes the same socket).
Bad input: a cursor retention dropped raises :class:`~.session.CursorGoneError`.
Cancellation: safe at any point; a live reader leaves the set, what its subscriber
queued dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TypeAlias

import trio

from .buffer import Run
from .session import LiveReader, LiveSubscriber, Session

__all__ = ["CaughtUp", "Chunks", "Follow", "KeepAlive", "ReadEvent", "Subscribe"]


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


Subscribe: TypeAlias = Callable[[], AbstractAsyncContextManager[LiveSubscriber | None]]
"""Opens a :class:`~.session.LiveSubscriber` for one wait of a caught-up reader
(``None``: the reader cannot be live now; it waits as usual). Leaving the context
normally writes what the subscriber queued; leaving it by an exception drops it."""


class Follow:
    """A reader of ``session`` from cursor ``after`` (see the module docstring)."""

    def __init__(
        self,
        session: Session,
        after: int,
        *,
        max_bytes: int,
        keepalive: float,
        subscribe: Subscribe | None = None,
    ) -> None:
        self.session = session
        self.cursor = after
        """The cursor of the last chunk handed out."""
        self._max_bytes = max_bytes
        self._keepalive = keepalive
        self._subscribe = subscribe
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
            woken = None if self._subscribe is None else await self._wait_live(self._subscribe)
            if woken is None:
                woken = await session.wait_beyond(self.cursor, self._keepalive)
            if not woken:
                return KeepAlive()

    async def _wait_live(self, subscribe: Subscribe) -> bool | None:
        """Wait in the session's live set, writing what the subscriber queued when
        woken for it: True when taken out of the set, False after ``keepalive``
        seconds with nothing offered, ``None`` if the reader cannot be live."""
        session = self.session
        async with subscribe() as subscriber:
            if subscriber is None:
                return None
            reader = LiveReader(subscriber, self.cursor)
            if not session.join_live(reader):
                return True  # a chunk came, or the end
            try:
                while not reader.left:
                    if reader.woken.is_set():  # its subscriber queued runs
                        reader.woken = trio.Event()
                        await subscriber.write_backlog()
                        session.live_drained()
                        continue
                    quiet_since = max(reader.joined_at, session.offered_at)
                    if trio.current_time() >= quiet_since + self._keepalive:
                        return False
                    with trio.move_on_at(quiet_since + self._keepalive):
                        await reader.woken.wait()
            finally:
                session.leave_live(reader)
                self.cursor = reader.cursor
        return True
