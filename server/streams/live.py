"""A stream's live set: its caught-up ``live=sse`` readers, offered each new append.

A reader that holds everything its stream shows (at its tail, the stream open) may
join the stream's :class:`LiveSet`; from then on the stream offers it each append as
it publishes it (:meth:`LiveSet.offer`), as a :class:`LiveAppend`: the stored record
and the ``Stream-Cursor`` of the control event after it, one for every reader of the
set (the current interval, or the highest cursor a reader of the set was already
given, so no reader's cursor goes back). A reader whose subscriber queued an append
for the reader's task to write is woken and stays in the set; one that refused an
append leaves the set woken, holding it; every reader does when the stream publishes
what it does not offer, closes or is deleted (:meth:`LiveSet.wake`). A reader that
left reads on as any reader, from the position it holds.

The stream's writer may hold back for readers behind: :meth:`LiveSet.behind` are those
with more than a bound queued, :meth:`LiveSet.drained` wakes a writer waiting for them
(:meth:`LiveSet.until_drained`) when one wrote its queue, and :meth:`LiveSet.take_out`
takes out the ones still behind. Nothing here blocks (but :meth:`LiveSet.until_drained`)
or raises. Cancellation: a reader that stops waiting leaves with :meth:`LiveSet.leave`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

import trio

from .cursors import interval_cursor
from .records import Record

if TYPE_CHECKING:
    from sandstream.server.http import Offered

__all__ = ["LiveAppend", "LiveReader", "LiveSet", "LiveSubscriber"]


@dataclass(frozen=True, slots=True)
class LiveAppend:
    """What the live readers of a stream are offered: a published ``record`` (not a
    close) and the ``cursor`` of the control event that follows its data."""

    record: Record
    cursor: int


Item = TypeVar("Item", contravariant=True)


class LiveSubscriber(Protocol[Item]):
    """How a caught-up reader takes what is published without its task waking: a
    stream's reader each :class:`LiveAppend`, a session's reader each of its runs."""

    def offer(self, item: Item) -> Offered:
        """Take ``item`` at once (never blocks, never raises): ``"taken"``;
        ``"queued"``, for the reader's task to write (it is woken, and stays in the
        set); ``"refused"``, the reader must read on by itself (it leaves the live set
        holding ``item``, and is offered nothing more)."""
        ...

    @property
    def queued(self) -> int:
        """Bytes it was offered and has not written yet."""
        ...

    async def write_backlog(self) -> None:
        """Write what it queued, in the reader's task (see :meth:`offer`)."""
        ...


class LiveReader:
    """A caught-up reader in a live set.

    ``subscriber`` takes the appends. ``position``: the stream position it holds,
    ``cursor``: the highest ``Stream-Cursor`` it was given (both as of when it left
    the set). ``joined_at``: when (trio time) it joined. ``left``: set when the stream
    takes it out of the set; ``woken``: set then, or when its subscriber queued an
    append (the reader re-arms it).
    """

    __slots__ = ("cursor", "joined_at", "left", "position", "subscriber", "woken")

    def __init__(self, subscriber: LiveSubscriber[LiveAppend], position: int, cursor: int) -> None:
        self.subscriber = subscriber
        self.position = position
        self.cursor = cursor
        self.joined_at = 0.0
        self.left = False
        self.woken = trio.Event()


class LiveSet:
    """One stream's live readers (see the module docstring); the stream decides who
    may join and what is offered."""

    __slots__ = ("_cursor", "_drained", "_position", "_readers", "offered_at")

    def __init__(self) -> None:
        self._readers: dict[LiveReader, None] = {}
        self._position = 0
        """The position every reader of the set holds."""
        self._cursor = 0
        """The highest cursor a reader of the set was given."""
        self._drained = trio.Event()
        self.offered_at = -math.inf
        """When (trio time) the set was last offered an append."""

    def __len__(self) -> int:
        return len(self._readers)

    def join(self, reader: LiveReader) -> None:
        """Add ``reader``, which holds everything its stream shows."""
        reader.joined_at = trio.current_time()
        self._position = reader.position
        self._cursor = max(self._cursor, reader.cursor)
        self._readers[reader] = None

    def leave(self, reader: LiveReader) -> None:
        """Take ``reader`` out of the set, holding every append so far (nothing if it
        was taken out already)."""
        if reader in self._readers:
            del self._readers[reader]
            reader.position, reader.cursor = self._position, self._cursor
            self._emptied()
            self.drained()

    def offer(self, record: Record) -> None:
        """Offer ``record`` (the newest published) to every reader; wake the ones that
        queued it, and take out (woken) the ones that refused it, holding it."""
        if not self._readers:
            return
        self.offered_at = trio.current_time()
        self._cursor = max(self._cursor, interval_cursor())
        self._position = record.end
        append = LiveAppend(record, self._cursor)
        refused = []
        for reader in self._readers:
            offered = reader.subscriber.offer(append)
            if offered == "queued":
                reader.woken.set()
            elif offered == "refused":
                refused.append(reader)
        if refused:
            self.take_out(refused)

    def behind(self, limit: int) -> list[LiveReader]:
        """The readers with more than ``limit`` bytes offered and not yet written."""
        return [reader for reader in self._readers if reader.subscriber.queued > limit]

    def take_out(self, readers: list[LiveReader]) -> None:
        """Take ``readers`` (of the set) out, woken, holding what they were offered."""
        for reader in readers:
            del self._readers[reader]
        self._wake(readers)

    def drained(self) -> None:
        """A reader wrote what it queued (or left): a writer waiting in
        :meth:`until_drained` looks again."""
        self._drained.set()
        self._drained = trio.Event()

    async def until_drained(self) -> None:
        """Wait for the next :meth:`drained`."""
        await self._drained.wait()

    def wake(self) -> None:
        """Take every reader out of the set, holding what it was offered."""
        readers, self._readers = list(self._readers), {}
        self._wake(readers)

    def _wake(self, readers: list[LiveReader]) -> None:
        for reader in readers:
            reader.position, reader.cursor = self._position, self._cursor
            reader.left = True
            reader.woken.set()
        self._emptied()

    def _emptied(self) -> None:
        """An empty set owes no reader a cursor."""
        if not self._readers:
            self._cursor = 0
