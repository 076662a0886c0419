"""How a caught-up reader of a stream waits: in its live set, else for its next change.

Every follower of a stream, a ``live=sse`` reader (by offset, :mod:`.sse_body`) and a
session's reader (by cursor, :mod:`sandstream.server.sessions.follow`), reads what is
after its own address, and once it holds everything waits here: :func:`wait_live` in
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
from collections.abc import Callable

import trio

from .live import LiveReader
from .stream import Stream

__all__ = ["wait_beyond", "wait_changed", "wait_live"]


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
