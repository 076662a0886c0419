"""How a reader follows a stream: what it reads, and how, caught up, it waits.

Every follower of a stream, a ``live=sse`` reader (by offset, :mod:`.sse_body`) and a
session's reader (by cursor, :mod:`sandstream.server.sessions.follow`), runs the one
loop of :class:`Follower`: it reads what is after its own address, ends when the stream
does, says once that it caught up, and once it holds everything waits here: :func:`wait_live` in
the stream's live set (:mod:`.live`), its subscriber written each append as it is
published and its task woken only to write what the subscriber queued (then the writer,
if it holds back for readers behind, looks again), or :func:`wait_changed` on the
stream's one wake-up per change where a reader cannot be live (:func:`wait_beyond`, by
offset: the ``live=sse`` readers and ``live=long-poll``). Both end at a deadline
the caller gives as a function (read again at each wake-up: a keep-alive moves with
the offers). Cancellation: a live reader leaves the set, what its subscriber queued
unwritten; nothing else is held.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Generic, TypeVar

import trio

from .live import LiveReader
from .stream import Stream

__all__ = ["Follower", "wait_beyond", "wait_changed", "wait_live"]

T = TypeVar("T")


class Follower(ABC, Generic[T]):
    """A reader following a stream to its end, an async iterator of what it hands out
    (``T``): whatever is after the reader (:meth:`_read`), until the stream ended
    (:meth:`_ended`); caught up, once what says so (:meth:`_caught_up`), then a wait in
    the live set (:meth:`_wait_live`), else for the stream's next change
    (:meth:`_wait_changed`), each to a deadline; past it, what the reader hands out
    then (:meth:`_timed_out`: ``None`` ends it)."""

    def __aiter__(self) -> Follower[T]:
        return self

    async def __anext__(self) -> T:
        while True:
            read = await self._read()
            if read is not None:
                return read
            if self._ended():
                raise StopAsyncIteration
            caught_up = self._caught_up()
            if caught_up is not None:
                return caught_up
            woken = await self._wait_live()
            if woken is None:
                woken = await self._wait_changed()
            if not woken:
                timed_out = self._timed_out()
                if timed_out is None:
                    raise StopAsyncIteration
                return timed_out

    @abstractmethod
    async def _read(self) -> T | None:
        """What is after the reader, moving it on (``None``: it holds everything)."""

    @abstractmethod
    def _ended(self) -> bool:
        """The reader holds everything and the stream has ended: nothing will come."""

    @abstractmethod
    def _caught_up(self) -> T | None:
        """What tells the reader's client it caught up (``None``: told already)."""

    @abstractmethod
    async def _wait_live(self) -> bool | None:
        """Wait in the stream's live set (:func:`wait_live`): True when taken out,
        False at the deadline, ``None`` if the reader cannot be live."""

    @abstractmethod
    async def _wait_changed(self) -> bool:
        """Wait for the stream's next change (:func:`wait_changed`): False at the
        deadline."""

    @abstractmethod
    def _timed_out(self) -> T | None:
        """What the reader hands out at a deadline (``None``: it ends there)."""


async def wait_live(stream: Stream, reader: LiveReader, deadline: Callable[[], float]) -> bool:
    """Wait in ``stream``'s live set as ``reader`` (at the stream's tail), writing what
    its subscriber queued whenever it is woken for that: True once taken out of the set
    (or when it could not join: the stream changed), False at ``deadline()`` (trio time)
    with the reader still live. It leaves the set either way, holding what it was offered
    (``reader.position``, ``reader.cursor``)."""
    if not stream.join_live(reader):
        return True
    live = stream.live
    try:
        while not reader.left:
            if reader.woken.is_set():  # its subscriber queued appends
                reader.woken = trio.Event()
                await reader.subscriber.write_backlog()
                live.drained()
                continue
            until = deadline()
            if trio.current_time() >= until:
                return False
            with trio.move_on_at(until):
                await reader.woken.wait()
    finally:
        stream.leave_live(reader)
    return True


async def wait_changed(stream: Stream, done: Callable[[], bool], deadline: float) -> bool:
    """Wait until ``done()``, looking again at each change of ``stream``: False if
    ``deadline`` (trio time) passed first."""
    with trio.move_on_at(deadline):
        while not done():
            await stream.changed()
        return True
    return False


async def wait_beyond(stream: Stream, position: int, deadline: float = math.inf) -> bool:
    """Wait until ``stream`` has data after ``position``, closes or is deleted: False if
    ``deadline`` (trio time) passed first."""
    return await wait_changed(
        stream,
        lambda: stream.tail > position or stream.closed or stream.deleted or stream.removed,
        deadline,
    )
