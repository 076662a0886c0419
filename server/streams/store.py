"""The stream store: every stream of one directory, their logs, their index.

:class:`StreamStore` is the Durable Streams model without HTTP: create (and fork),
append (with idempotent producers and ``Stream-Seq``), close, delete (soft while forks
read it), read by position, expire by TTL (readers wait for data with :mod:`.follow`). Run it with
``await nursery.start(store.run)``: that recovers every stream from the index and its
log, then runs the committer (:mod:`.committer`), the checkpoints and the expiry sweep;
cancelling it writes a last checkpoint and closes everything.

Bad requests raise the :mod:`.errors` the protocol answers with; a disk that refuses a
write, a read or a new stream (full, out of file descriptors) raises
:class:`StreamStoreFailedError` for that request alone, and the next one tries again
(:mod:`.committer`). A caller cancelled
while its append is being written does not undo it: the append is published when
written, answered or not. Appends to one stream are stored in the order they were
accepted; an append is accepted (validated, its producer state taken) without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Final

import trio

from .committer import Committer, SyncPolicy
from .errors import (
    InvalidStreamRequestError,
    StreamClosedError,
    StreamConflictError,
    StreamFullError,
    StreamGoneError,
    StreamNotFoundError,
    StreamStoreFailedError,
    TooManyStreamsError,
)
from .headers import media_type
from .index import Checkpoint, StreamIndex, StreamRow
from .jsonmode import is_json, json_messages, json_payload
from .producers import Accept, Duplicate, check
from .records import ProducerStamp, Record, encode
from .segments import DEFAULT_SEGMENT_BYTES, SegmentLog
from .settings import StreamSettings
from .stream import ForkOrigin, Stream, StreamConfig

__all__ = ["Appended", "Chunk", "StreamStore"]

log = logging.getLogger("sandstream.streams")

CHECKPOINT_INTERVAL: Final = 1.0
SWEEP_INTERVAL: Final = 30.0
LOGS_DIR: Final = "logs"


@dataclass(frozen=True, slots=True)
class Appended:
    """An append's outcome: the stream's tail after it, whether the stream is closed,
    and for a producer whether it was a retry of stored data and its highest seq."""

    tail: int
    closed: bool
    duplicate: bool = False
    producer_seq: int | None = None


@dataclass(frozen=True, slots=True)
class Chunk:
    """Stored bytes of whole appends from a read's position, and the position after."""

    payload: bytes
    next: int


class StreamStore:
    """Every stream under ``directory`` (see the module docstring).

    ``sync``: when appends become durable. ``segment_bytes``: a segment file's size.
    ``tail_bytes``: a stream's newest bytes kept in memory for live readers. The quotas
    bound the streams of the HTTP API, those outside ``server_prefixes`` (the paths
    of the streams the server writes itself): ``max_streams`` at once,
    ``max_stream_bytes`` in one (its own log, from its base).
    """

    def __init__(
        self,
        directory: Path,
        *,
        sync: SyncPolicy | None = None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        tail_bytes: int = 256 * 1024,
        max_streams: int | None = None,
        max_stream_bytes: int | None = None,
        server_prefixes: tuple[str, ...] = (),
    ) -> None:
        self.directory = directory
        self.sync = sync or SyncPolicy()
        self._segment_bytes = segment_bytes
        self._tail_bytes = tail_bytes
        self._max_streams = max_streams
        self._max_stream_bytes = max_stream_bytes
        self._server_prefixes = server_prefixes
        self._streams: dict[str, Stream] = {}
        self._committer = Committer(self.sync)
        self._index: StreamIndex | None = None
        self._paths = trio.Lock()
        self._nursery: trio.Nursery | None = None

    @classmethod
    def from_settings(
        cls, settings: StreamSettings, server_prefixes: tuple[str, ...] = ()
    ) -> StreamStore:
        """The store :class:`StreamSettings` describe, the streams under
        ``server_prefixes`` written by the server alone (outside the quotas)."""
        return cls(
            settings.directory,
            sync=settings.sync,
            segment_bytes=settings.segment_bytes,
            tail_bytes=settings.tail_bytes,
            max_streams=settings.max_streams,
            max_stream_bytes=settings.max_stream_bytes,
            server_prefixes=server_prefixes,
        )

    # -- lifecycle -----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Recover, serve until cancelled, then checkpoint and close."""
        index = await StreamIndex.open(self.directory)
        self._index = index
        try:
            await self._recover(index)
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self._committer.run)
                nursery.start_soon(self._checkpoints)
                nursery.start_soon(self._sweep)
                task_status.started()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                try:
                    await self._checkpoint()
                finally:
                    await self._committer.close()
                    for stream in self._streams.values():
                        stream.log.close()
                    await index.close()

    async def _recover(self, index: StreamIndex) -> None:
        by_key: dict[int, Stream] = {}
        for row in await index.rows():
            origin = None
            if row.source_key is not None:
                source = by_key.get(row.source_key)
                if source is None:
                    log.error("streams: fork %r lost its source; dropping it", row.path)
                    continue
                origin = ForkOrigin(source)
                source.forks += 1
            cp = row.checkpoint
            seg_log, records = await trio.to_thread.run_sync(
                SegmentLog.recover,
                self._log_dir(row.key),
                row.base,
                cp.position,
                self._segment_bytes,
            )
            source_path = origin.source.path if origin else None
            config = StreamConfig(
                row.content_type,
                row.ttl,
                row.expires_at,
                source_path,
                row.fork_offset,
                row.fork_sub_offset,
            )
            stream = Stream(
                key=row.key,
                path=row.path,
                config=config,
                log=seg_log,
                base=row.base,
                accessed_at=row.accessed_at,
                origin=origin,
                tail_bytes=self._tail_bytes,
            )
            stream.restore(cp)
            for record in records:
                stream.replay(record)
            stream.deleted = row.deleted
            by_key[row.key] = stream
            self._streams[row.path] = stream

    def _log_dir(self, key: int) -> Path:
        return self.directory / LOGS_DIR / str(key)

    @property
    def _idx(self) -> StreamIndex:
        if self._index is None:
            raise RuntimeError("the stream store is not running")
        return self._index

    # -- looking up ----------------------------------------------------------------

    def get(self, path: str) -> Stream:
        """The stream at ``path``; raises :class:`StreamNotFoundError` (none, or
        expired) or :class:`StreamGoneError` (soft-deleted)."""
        stream = self._streams.get(path)
        if stream is None:
            raise StreamNotFoundError(f"no stream at {path!r}")
        if stream.expired(time.time()):
            self._expire(stream)
            raise StreamNotFoundError(f"the stream at {path!r} has expired")
        if stream.deleted:
            raise StreamGoneError(f"the stream at {path!r} was deleted")
        return stream

    def paths(self, prefix: str) -> list[str]:
        """The paths of the streams held now (deleted ones too, until removed) that
        start with ``prefix``."""
        return [path for path in self._streams if path.startswith(prefix)]

    def _expire(self, stream: Stream) -> None:
        if self._nursery is not None and not stream.deleted:
            stream.deleted = True
            self._nursery.start_soon(self._delete_stream, stream)

    # -- creating ------------------------------------------------------------------

    async def create(
        self, path: str, config: StreamConfig, body: bytes, *, closed: bool
    ) -> tuple[Stream, bool]:
        """Create the stream at ``path`` (``True``), or find it created alike
        (``False``); raises :class:`StreamConflictError` when it exists otherwise."""
        async with self._paths:
            existing = self._streams.get(path)
            if existing is not None and existing.expired(time.time()):
                if not existing.deleted:
                    existing.deleted = True
                    await self._delete_stream(existing)
                while not existing.removed and not existing.forks:
                    await existing.changed()
                existing = self._streams.get(path)
            if existing is not None:
                if existing.deleted:
                    raise StreamConflictError("a deleted stream still used by forks is there")
                origin = self._fork_origin(config) if config.fork_from else None
                effective = _effective(config, origin.source if origin else None)
                if not existing.config.matches(effective) or existing.closing != closed:
                    raise StreamConflictError("the stream exists with another configuration")
                return existing, False
            self._check_quota(path, len(body))
            return await self._create_new(path, config, body, closed=closed), True

    def _check_quota(self, path: str, body_bytes: int) -> None:
        """A new stream of the HTTP API at ``path`` with ``body_bytes``: raise
        :class:`TooManyStreamsError` or :class:`StreamFullError` past a quota."""
        if path.startswith(self._server_prefixes):
            return
        limit = self._max_streams
        if limit is not None:
            held = sum(1 for p in self._streams if not p.startswith(self._server_prefixes))
            if held >= limit:
                raise TooManyStreamsError(
                    f"{held} streams are held, the most this server keeps: delete one first"
                )
        self._check_room(path, 0, body_bytes)

    def _check_room(self, path: str, stored: int, more: int) -> None:
        """Raise :class:`StreamFullError` if a stream of the HTTP API holding ``stored``
        bytes cannot take ``more``."""
        limit = self._max_stream_bytes
        if limit is None or path.startswith(self._server_prefixes):
            return
        if stored + more > limit:
            raise StreamFullError(
                f"the stream holds {stored} bytes and may hold {limit}: {more} more do not fit"
            )

    def _fork_origin(self, config: StreamConfig) -> ForkOrigin:
        assert config.fork_from is not None
        source = self._streams.get(config.fork_from)
        if source is None or source.expired(time.time()):
            raise StreamNotFoundError(f"no stream at {config.fork_from!r} to fork")
        if source.deleted:
            raise StreamConflictError("the fork's source was deleted")
        return ForkOrigin(source)

    async def _create_new(
        self, path: str, requested: StreamConfig, body: bytes, *, closed: bool
    ) -> Stream:
        origin = None
        base = 0
        inherited = b""
        if requested.fork_from is not None:
            origin = self._fork_origin(requested)
            source = origin.source
            if requested.content_type and media_type(requested.content_type) != media_type(
                source.content_type
            ):
                raise StreamConflictError("a fork has its source's content type")
            base = source.tail if requested.fork_offset is None else requested.fork_offset
            inherited = await self._boundary_part(source, base, requested.fork_sub_offset)
            requested = replace(requested, fork_offset=base)
        config = _effective(requested, origin.source if origin else None)
        payload = self._payload(config, body, creating=True)
        now = time.time()
        key = await self._idx.insert(
            StreamRow(
                key=0,
                path=path,
                content_type=config.content_type,
                ttl=config.ttl,
                expires_at=config.expires_at,
                accessed_at=now,
                source_key=origin.source.key if origin else None,
                fork_offset=config.fork_offset,
                fork_sub_offset=config.fork_sub_offset,
                base=base,
                deleted=False,
                checkpoint=Checkpoint(base, base, None, closed and not payload, None, {}),
            )
        )
        directory = self._log_dir(key)
        try:
            seg_log = await trio.to_thread.run_sync(
                SegmentLog.create, directory, base, self._segment_bytes
            )
        except BaseException as error:
            with trio.CancelScope(shield=True):
                await self._idx.remove([key])
            if isinstance(error, OSError):
                raise StreamStoreFailedError(f"the stream could not be created: {error}") from None
            raise
        stream = Stream(
            key=key,
            path=path,
            config=config,
            log=seg_log,
            base=base,
            accessed_at=now,
            origin=origin,
            tail_bytes=self._tail_bytes,
        )
        if origin is not None:
            origin.source.forks += 1
        self._streams[path] = stream
        stream.closed = stream.closing = closed and not (inherited or payload)
        if inherited or payload:
            await self._write(stream, inherited + payload, producer=None, seq=None, close=closed)
        return stream

    async def _boundary_part(self, source: Stream, anchor: int, sub_offset: int) -> bytes:
        """The part of the append at ``anchor`` in ``source`` that a fork at
        ``(anchor, sub_offset)`` inherits; validates the fork offset."""
        if anchor > source.tail:
            raise InvalidStreamRequestError("the fork offset is beyond the source's tail")
        if anchor < source.tail:
            first = await self._read(source, anchor, source.tail, 1)
        elif sub_offset:
            raise InvalidStreamRequestError("the fork sub-offset is beyond the source's tail")
        else:
            return b""
        if not sub_offset:
            return b""
        payload = first.payload
        if source.json:
            messages = json_messages(payload)
            if sub_offset > len(messages):
                raise InvalidStreamRequestError("the fork sub-offset is past the next append")
            return b"".join(messages[:sub_offset])
        if sub_offset > len(payload):
            raise InvalidStreamRequestError("the fork sub-offset is past the next append")
        return payload[:sub_offset]

    @staticmethod
    def _payload(config: StreamConfig, body: bytes, *, creating: bool) -> bytes:
        if is_json(config.content_type):
            return json_payload(body, allow_empty=creating) if body or not creating else b""
        return body

    # -- appending -----------------------------------------------------------------

    async def append(
        self,
        stream: Stream,
        body: bytes,
        *,
        content_type: str,
        producer: ProducerStamp | None,
        stream_seq: str | None,
        close: bool,
    ) -> Appended:
        """Append ``body`` (non-empty), closing the stream after it with ``close``."""
        self._committer.check(stream.log)
        if stream.closing:
            if producer is not None and producer == stream.closed_by:
                await self._until_stored(stream)
                return Appended(stream.tail, True, duplicate=True, producer_seq=producer.seq)
            raise StreamClosedError(stream.end)
        self._check_room(stream.path, stream.end - stream.base, len(body))
        if media_type(content_type) != media_type(stream.content_type):
            raise StreamConflictError(
                f"the stream's content type is {stream.content_type!r}, not {content_type!r}"
            )
        verdict = None
        if producer is not None:
            verdict = check(stream.producers.get(producer.id), producer.epoch, producer.seq)
            if isinstance(verdict, Duplicate):
                await self._until_stored(stream)
                return Appended(
                    stream.tail, stream.closed, duplicate=True, producer_seq=verdict.last_seq
                )
        last_seq = stream.stream_seq
        if stream_seq is not None and last_seq is not None and stream_seq <= last_seq:
            raise StreamConflictError(f"Stream-Seq {stream_seq!r} is not after {last_seq!r}")
        payload = self._payload(stream.config, body, creating=False)
        if isinstance(verdict, Accept):
            assert producer is not None
            stream.producers[producer.id] = verdict.state
        stream.touch()
        await self._write(stream, payload, producer=producer, seq=stream_seq, close=close)
        return Appended(
            stream.tail, stream.closed, producer_seq=None if producer is None else producer.seq
        )

    async def _write(
        self,
        stream: Stream,
        payload: bytes,
        *,
        producer: ProducerStamp | None,
        seq: str | None,
        close: bool,
    ) -> None:
        record = encode(payload, producer=producer, stream_seq=seq, close=close)
        start = stream.end
        stream.end = start + len(record)
        if seq is not None:
            stream.stream_seq = seq
        if close:
            stream.closing = True
            stream.closed_by = producer
        stored = Record(start, stream.end, payload, producer, seq, close)
        written = trio.Event()
        failure: list[BaseException] = []

        def finished(error: BaseException | None) -> None:
            _publish(stream, stored, error)
            if error is not None:
                failure.append(error)
            written.set()

        self._committer.commit(stream.log, record, finished)
        await written.wait()
        if failure:
            raise StreamStoreFailedError(f"the append was not stored: {failure[0]}")

    def append_soon(
        self,
        stream: Stream,
        payload: bytes,
        done: Callable[[Record | BaseException], None],
        *,
        tag: int | None = None,
        offer: bool = True,
    ) -> None:
        """Append ``payload`` as the stream's owner (no producer, no seq, no checks of
        content), with the owner's ``tag`` (:mod:`.records`): queued at once, never
        waits. ``done`` gets the stored record once it is published (offered to the
        stream's live readers unless ``offer`` is false: they are woken to read it), or
        the exception that kept it from being stored. Raises
        :class:`StreamStoreFailedError` or :class:`StreamClosedError` at once."""
        self._committer.check(stream.log)
        if stream.closing:
            raise StreamClosedError(stream.end)
        record = encode(payload, tag=tag)
        start = stream.end
        stream.end = start + len(record)
        stored = Record(start, stream.end, payload, None, None, False, tag)

        def finished(error: BaseException | None) -> None:
            if error is not None:
                stream.roll_back()
                done(error)
                return
            stream.publish(stored, offer=offer)
            done(stored)

        self._committer.commit(stream.log, record, finished)

    def trim(self, stream: Stream, position: int) -> None:
        """Retention: ``stream`` starts at ``position`` (a record boundary) from now on
        (reads below it are gone); its segments that end at or below it are deleted in
        the background."""
        if position <= stream.start:
            return
        stream.start = position
        stream.dirty = True
        if self._nursery is not None:
            self._nursery.start_soon(
                self._committer.exclusive, partial(stream.log.drop_before, position)
            )

    async def close(self, stream: Stream, producer: ProducerStamp | None) -> Appended:
        """Close ``stream`` without data (idempotent)."""
        self._committer.check(stream.log)
        if producer is not None:
            if stream.closing:
                if producer == stream.closed_by:
                    await self._until_stored(stream)
                    return Appended(stream.tail, True, duplicate=True, producer_seq=producer.seq)
                raise StreamClosedError(stream.end)
            verdict = check(stream.producers.get(producer.id), producer.epoch, producer.seq)
            if isinstance(verdict, Duplicate):
                await self._until_stored(stream)
                return Appended(
                    stream.tail, stream.closed, duplicate=True, producer_seq=verdict.last_seq
                )
            stream.producers[producer.id] = verdict.state
        elif stream.closing:
            await self._until_stored(stream)
            return Appended(stream.tail, True)
        stream.closing = True
        stream.closed_by = producer
        stream.touch()
        await self._until_stored(stream)
        await self._checkpoint([stream], closing=True)
        stream.show_closed()
        return Appended(stream.tail, True, producer_seq=None if producer is None else producer.seq)

    async def _until_stored(self, stream: Stream) -> None:
        """Wait until everything ``stream`` has accepted so far is stored. Raises
        :class:`StreamStoreFailedError` if some of it could not be (rolled back)."""
        target = stream.end
        while stream.tail < target and not stream.removed:
            self._committer.check(stream.log)
            if stream.end < target:
                raise StreamStoreFailedError("an append before it could not be stored")
            await stream.changed()

    # -- deleting ------------------------------------------------------------------

    async def delete(self, path: str) -> None:
        """Delete the stream at ``path``: gone at once, removed when no fork reads it."""
        async with self._paths:
            stream = self.get(path)
            stream.deleted = True
            await self._delete_stream(stream)

    async def _delete_stream(self, stream: Stream) -> None:
        stream.closing = True  # takes no more appends
        with trio.CancelScope(shield=True):
            try:
                await self._until_stored(stream)
            except StreamStoreFailedError:
                stream.closing = True  # what could not be stored goes with the stream
            if stream.forks:
                await self._idx.mark_deleted(stream.key)
                stream.notify()
                return
            doomed = [stream]
            source = stream.origin.source if stream.origin else None
            while source is not None:
                source.forks -= 1
                if source.forks or not source.deleted:
                    break
                doomed.append(source)
                source = source.origin.source if source.origin else None
            await self._idx.remove([s.key for s in doomed])
            for gone in doomed:
                gone.removed = True
                if self._streams.get(gone.path) is gone:
                    del self._streams[gone.path]
                await self._committer.exclusive(gone.log.remove)
                gone.notify()

    # -- reading -------------------------------------------------------------------

    async def read(self, stream: Stream, position: int, max_bytes: int) -> Chunk:
        """Stored bytes of ``stream`` from ``position`` (a position it handed out) on:
        whole appends, about ``max_bytes``, empty at the tail."""
        if position > stream.tail:
            raise InvalidStreamRequestError("the offset is beyond the stream's tail")
        end = stream.tail
        parts: list[bytes] = []
        size = 0
        while position < end and (not parts or size < max_bytes):
            chunk = await self._read(stream, position, end, max_bytes - size)
            parts.append(chunk.payload)
            size += len(chunk.payload)
            position = chunk.next
        return Chunk(b"".join(parts), position)

    async def _read(self, stream: Stream, position: int, end: int, max_bytes: int) -> Chunk:
        if position < stream.base:
            assert stream.origin is not None
            return await self._read(
                stream.origin.source, position, min(end, stream.base), max_bytes
            )
        records = await self.read_records(stream, position, end, max_bytes)
        return Chunk(b"".join(r.payload for r in records), records[-1].end)

    async def read_records(
        self, stream: Stream, position: int, end: int, max_bytes: int
    ) -> list[Record]:
        """The records of ``stream``'s own log from ``position`` (a record boundary) up
        to ``end``: at least one, about ``max_bytes`` of payload, from memory when they
        are recent. Raises :class:`StreamGoneError` below what is retained and
        :class:`InvalidStreamRequestError` at a position that is no boundary."""
        if position < stream.start:
            raise StreamGoneError("the position is below what the stream retains")
        records = stream.recent_from(position, max_bytes)
        if records is None:
            try:
                records = await trio.to_thread.run_sync(stream.log.read, position, end, max_bytes)
            except OSError as error:
                raise StreamStoreFailedError(f"the stream could not be read: {error}") from None
        records = [r for r in records if r.end <= end]
        if not records:
            raise InvalidStreamRequestError("not an offset of this stream")
        return records

    def first_position(self, stream: Stream) -> int:
        """The first position of ``stream`` still stored (where ``offset=-1`` reads)."""
        if stream.origin is not None:
            return self.first_position(stream.origin.source)
        first = stream.log.first
        return max(stream.start, stream.base if first is None else first)

    # -- checkpoints and expiry ------------------------------------------------------

    async def _checkpoints(self) -> None:
        while True:
            await trio.sleep(
                min(CHECKPOINT_INTERVAL, self.sync.interval)
                if self.sync.mode == "interval"
                else CHECKPOINT_INTERVAL
            )
            await self._checkpoint()

    async def _checkpoint(
        self, streams: list[Stream] | None = None, *, closing: bool = False
    ) -> None:
        """Store the state of ``streams`` (default: every changed one) as of what is
        durable (``closing``: theirs is a close without data, :meth:`.Stream.checkpoint`)."""
        chosen = [s for s in self._streams.values() if s.dirty] if streams is None else streams
        chosen = [s for s in chosen if not s.removed]
        if not chosen:
            return
        entries = []
        for stream in chosen:
            stream.dirty = False
            entries.append((stream.key, stream.accessed_at, stream.checkpoint(closing=closing)))
        if self.sync.mode == "interval":
            await self._committer.sync_now()
        await self._idx.checkpoint(entries)

    async def _sweep(self) -> None:
        while True:
            await trio.sleep(SWEEP_INTERVAL)
            now = time.time()
            for stream in list(self._streams.values()):
                if stream.expired(now):
                    self._expire(stream)


def _publish(stream: Stream, record: Record, error: BaseException | None) -> None:
    """Show a written ``record``; roll back what ``stream`` accepted if it was not."""
    if error is None:
        stream.publish(record)
    else:
        stream.roll_back()


def _effective(config: StreamConfig, source: Stream | None) -> StreamConfig:
    """A fork's configuration with what it inherits (content type, TTL or expiry)."""
    if source is None:
        return config
    inherited = config
    if not config.content_type:
        inherited = replace(inherited, content_type=source.content_type)
    if config.ttl is None and config.expires_at is None:
        inherited = replace(inherited, ttl=source.config.ttl, expires_at=source.config.expires_at)
    if inherited.fork_offset is None:
        inherited = replace(inherited, fork_offset=source.tail)
    return inherited
