"""One stream in memory: its configuration, what it has accepted, what it shows.

A stream keeps two views. What it has **accepted** (``end``, ``closing``, producer
states, ``Stream-Seq``) moves when an append is validated, synchronously, so the next
append is judged against it. What it **stores** (``tail``, ``closed``, and the producer
states and ``Stream-Seq`` as of ``tail``) moves when the committer has written the
append: readers never see a byte before it is stored, a checkpoint holds only what is
stored, and an append the disk refused rolls what was accepted back to what is stored
(:meth:`Stream.roll_back`), so the next append is judged as if it never came. Its
newest records stay in memory (``recent``, up to ``tail_bytes``) so that live readers
are served without touching the disk; a reader that falls behind reads the same bytes
from the log. :meth:`Stream.changed` wakes waiting readers once per change; caught-up
readers in its live set (:attr:`Stream.live`, :mod:`.live`) are offered each append
instead, except a close, an append over ``tail_bytes`` and one its writer asks not to
offer, which wake them like any change. Every reader of the stream waits there: the
``live=sse`` readers by offset and a session's readers by cursor (:mod:`.follow`).
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass

import trio

from .headers import media_type
from .index import Checkpoint
from .jsonmode import is_json
from .live import LiveReader, LiveSet
from .producers import ProducerState
from .records import ProducerStamp, Record
from .segments import SegmentLog

__all__ = ["ForkOrigin", "Stream", "StreamConfig"]


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """What a create asks for; an idempotent create must ask for the same again."""

    content_type: str
    ttl: int | None
    expires_at: float | None
    fork_from: str | None = None
    fork_offset: int | None = None
    fork_sub_offset: int = 0

    def matches(self, other: StreamConfig) -> bool:
        """Whether ``other`` asks for this configuration (content types by media type)."""
        return (
            media_type(self.content_type) == media_type(other.content_type)
            and self.ttl == other.ttl
            and self.expires_at == other.expires_at
            and self.fork_from == other.fork_from
            and self.fork_offset == other.fork_offset
            and self.fork_sub_offset == other.fork_sub_offset
        )


@dataclass(frozen=True, slots=True)
class ForkOrigin:
    """Where a fork's inherited data comes from: ``source`` up to the fork's base."""

    source: Stream


class Stream:
    """One stream (see the module docstring)."""

    def __init__(
        self,
        *,
        key: int,
        path: str,
        config: StreamConfig,
        log: SegmentLog,
        base: int,
        accessed_at: float,
        origin: ForkOrigin | None,
        tail_bytes: int,
    ) -> None:
        self.key = key
        self.path = path
        self.config = config
        self.log = log
        self.base = base
        self.start = base
        """The first position readers may read (retention moves it up)."""
        self.origin = origin
        self.accessed_at = accessed_at
        self.json = is_json(config.content_type)
        # accepted
        self.end = log.end
        self.closing = False
        self.closed_by: ProducerStamp | None = None
        self.stream_seq: str | None = None
        self.producers: dict[str, ProducerState] = {}
        # stored (what readers see)
        self.tail = log.end
        self.closed = False
        self._stored_seq: str | None = None
        self._stored_producers: dict[str, ProducerState] = {}
        self._stored_closed_by: ProducerStamp | None = None
        # lifecycle
        self.forks = 0
        self.deleted = False
        self.removed = False
        self.dirty = False
        self._recent: list[Record] = []
        self._recent_starts: list[int] = []
        self._recent_bytes = 0
        self._tail_bytes = tail_bytes
        self._changed = trio.Event()
        self.live = LiveSet()
        """The caught-up readers offered each append (join with :meth:`join_live`)."""

    @property
    def content_type(self) -> str:
        return self.config.content_type

    def expired(self, now: float) -> bool:
        """Whether the stream's TTL or expiry time has passed at ``now`` (epoch s)."""
        config = self.config
        if config.expires_at is not None and now >= config.expires_at:
            return True
        return config.ttl is not None and now >= self.accessed_at + config.ttl

    def touch(self) -> None:
        """A read or write: the TTL starts again."""
        self.accessed_at = time.time()
        if self.config.ttl is not None:
            self.dirty = True

    # -- what readers see ----------------------------------------------------------

    def restore(self, checkpoint: Checkpoint) -> None:
        """Take ``checkpoint``'s state as accepted and stored (recovery)."""
        self.start = checkpoint.start
        self.stream_seq = self._stored_seq = checkpoint.stream_seq
        self.producers = dict(checkpoint.producers)
        self._stored_producers = dict(checkpoint.producers)
        self.closed = self.closing = checkpoint.closed
        self.closed_by = self._stored_closed_by = checkpoint.closed_by

    def replay(self, record: Record) -> None:
        """Take ``record``, written after the stream's checkpoint, as accepted and
        stored (recovery)."""
        self.end = record.end
        self._accept(record)
        self._store(record)
        self.closing = self.closed
        self.dirty = True

    def _accept(self, record: Record) -> None:
        if record.producer is not None:
            stamp = record.producer
            self.producers[stamp.id] = ProducerState(stamp.epoch, stamp.seq)
        if record.stream_seq is not None:
            self.stream_seq = record.stream_seq
        if record.close:
            self.closed_by = record.producer

    def _store(self, record: Record) -> None:
        self.tail = record.end
        if record.producer is not None:
            stamp = record.producer
            self._stored_producers[stamp.id] = ProducerState(stamp.epoch, stamp.seq)
        if record.stream_seq is not None:
            self._stored_seq = record.stream_seq
        if record.close:
            self.closed = True
            self._stored_closed_by = record.producer

    def roll_back(self) -> None:
        """An append the disk refused: what was accepted is what is stored again (the
        committer failed every append of the stream still waiting with it)."""
        self.end = self.tail
        self.closing = self.closed
        self.closed_by = self._stored_closed_by
        self.stream_seq = self._stored_seq
        self.producers = dict(self._stored_producers)
        self._wake_waiting()

    def checkpoint(self, *, closing: bool = False) -> Checkpoint:
        """What is stored, as of ``tail``. ``closing``: a close without data, after
        everything accepted was stored: what was accepted, and the close."""
        if closing:
            return Checkpoint(
                self.tail, self.start, self.stream_seq, True, self.closed_by, dict(self.producers)
            )
        return Checkpoint(
            self.tail,
            self.start,
            self._stored_seq,
            self.closed,
            self._stored_closed_by,
            dict(self._stored_producers),
        )

    def publish(self, record: Record, *, offer: bool = True) -> None:
        """The committer wrote ``record``: show it, offer it to the live readers (or,
        without ``offer``, wake them), and wake waiting readers."""
        self._store(record)
        self.dirty = True
        if not self.closed:
            self._remember(record)
        else:
            self._forget()
        if record.close or not offer or len(record.payload) > self._tail_bytes:
            self.live.wake()
        else:
            self.live.offer(record)
        self._wake_waiting()

    def show_closed(self) -> None:
        """A close without data is stored: show it and wake readers."""
        self.closed = True
        self._stored_seq = self.stream_seq
        self._stored_producers = dict(self.producers)
        self._stored_closed_by = self.closed_by
        self.dirty = True
        self._forget()
        self.notify()

    def notify(self) -> None:
        """Wake every reader: those waiting in :meth:`changed` and the live ones."""
        self.live.wake()
        self._wake_waiting()

    def _wake_waiting(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def join_live(self, reader: LiveReader) -> bool:
        """Add ``reader`` to the live set; False (not added) unless it holds everything
        the stream shows and the stream is open. Leave with :meth:`leave_live`."""
        if reader.position != self.tail or self.closed or self.deleted or self.removed:
            return False
        self.live.join(reader)
        return True

    def leave_live(self, reader: LiveReader) -> None:
        """Take ``reader`` out of the live set, holding every append so far (nothing if
        the stream took it out already)."""
        self.live.leave(reader)

    @property
    def live_readers(self) -> int:
        """How many caught-up readers the stream offers its appends to now."""
        return len(self.live)

    async def changed(self) -> None:
        """Wait for the next change (new data, closure, deletion)."""
        await self._changed.wait()

    def recent_from(self, position: int, max_bytes: int) -> list[Record] | None:
        """The records from ``position`` kept in memory (about ``max_bytes``), or
        ``None`` when ``position`` is not among them."""
        index = bisect.bisect_left(self._recent_starts, position)
        if index == len(self._recent) or self._recent_starts[index] != position:
            return None
        records: list[Record] = []
        size = 0
        for record in self._recent[index:]:
            if records and size + len(record.payload) > max_bytes:
                break
            records.append(record)
            size += len(record.payload)
        return records

    def _remember(self, record: Record) -> None:
        self._recent.append(record)
        self._recent_starts.append(record.start)
        self._recent_bytes += len(record.payload)
        drop = 0
        while self._recent_bytes > self._tail_bytes and drop < len(self._recent) - 1:
            self._recent_bytes -= len(self._recent[drop].payload)
            drop += 1
        if drop:
            del self._recent[:drop]
            del self._recent_starts[:drop]

    def _forget(self) -> None:
        self._recent = []
        self._recent_starts = []
        self._recent_bytes = 0
