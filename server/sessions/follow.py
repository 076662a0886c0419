"""One reader of a session: replay from a cursor, then follow live until the end.

:class:`Follow` yields :class:`Chunks` (whole stored runs, ≤ ``max_bytes`` a read),
:class:`CaughtUp` and :class:`KeepAlive` for every transport, holding only its cursor::

    async for event in Follow(session, after=cursor, max_bytes=..., keepalive=15):
        ...

It runs the loop every reader of a stream runs
(:class:`sandstream.server.streams.Follower`), by cursor: caught up, with
``subscribe``, it waits in the stream's live set, its subscriber
(:class:`~sandstream.server.streams.LiveSubscriber`) offered each run the stream
publishes (writing, when woken for it, what its subscriber queued); else for the
stream's next change. The caller must have written each event before asking for the
next (the subscriber writes the same socket).
Bad input: a cursor retention dropped raises :class:`~.errors.CursorGoneError`.
Cancellation: safe at any point; a live reader leaves the set, what its subscriber
queued dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from sandstream.server.streams import (
    Follower,
    LiveAppend,
    LiveReader,
    LiveSubscriber,
    wait_live,
)

from .buffer import Run
from .session import Session

if TYPE_CHECKING:
    from sandstream.server.http import Offered

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


Subscribe: TypeAlias = Callable[[], AbstractAsyncContextManager[LiveSubscriber[Run] | None]]
"""Opens a subscriber of runs (:class:`~sandstream.server.streams.LiveSubscriber`) for
one wait of a caught-up reader (``None``: the reader cannot be live now; it waits as
usual). Leaving the context normally writes what the subscriber queued; leaving it by
an exception drops it."""


class Follow(Follower[ReadEvent]):
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

    async def _read(self) -> Chunks | None:
        session = self.session
        runs = await session.read_runs(self.cursor, self._max_bytes)
        if not runs:
            return None
        self.cursor = runs[-1].last
        caught_up = self.cursor == session.last_cursor and not session.ended
        self._announced = caught_up
        return Chunks(runs, caught_up)

    def _ended(self) -> bool:
        return self.session.ended

    def _caught_up(self) -> CaughtUp | None:
        if self._announced:
            return None
        self._announced = True
        return CaughtUp(self.cursor)

    async def _wait_live(self) -> bool | None:
        """In the session's stream's live set with a subscriber, if one opens."""
        if self._subscribe is None:
            return None
        session = self.session
        async with self._subscribe() as subscriber:
            if subscriber is None:
                return None
            if self.cursor != session.last_cursor or session.ended:
                return True  # a chunk came, or the end
            stream = session.stream
            offers = _RunOffers(session, subscriber, self.cursor)
            reader = LiveReader(offers, stream.tail, 0)
            keepalive = self._keepalive
            try:
                return await wait_live(
                    stream,
                    reader,
                    lambda: max(reader.joined_at, stream.live.offered_at) + keepalive,
                )
            finally:
                self.cursor = offers.cursor

    async def _wait_changed(self) -> bool:
        return await self.session.wait_beyond(self.cursor, self._keepalive)

    def _timed_out(self) -> KeepAlive:
        return KeepAlive()


class _RunOffers:
    """A session reader's subscriber as its stream's live set offers to: each record
    offered as the session's run (:meth:`.session.Session.run_of`), and the cursor of
    the newest chunk it holds."""

    __slots__ = ("_session", "_subscriber", "cursor")

    def __init__(self, session: Session, subscriber: LiveSubscriber[Run], cursor: int) -> None:
        self._session = session
        self._subscriber = subscriber
        self.cursor = cursor

    def offer(self, append: LiveAppend) -> Offered:
        run = self._session.run_of(append.record)
        self.cursor = run.last  # held whatever the answer: refused, it reads on after it
        return self._subscriber.offer(run)

    @property
    def queued(self) -> int:
        return self._subscriber.queued

    async def write_backlog(self) -> None:
        await self._subscriber.write_backlog()
