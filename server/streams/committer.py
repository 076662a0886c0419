"""Group commit: one task writes every stream's appends, and one fsync covers many.

Appends queue their records with :meth:`Committer.commit`; the committer's task takes
all that are queued, writes them in a worker thread (each log's records in one write)
and, under the ``commit`` sync policy, fdatasyncs every log it wrote before anyone is
answered, up to :data:`SYNC_THREADS` logs at once (concurrent syncs share the file
system's journal commits, so a commit that wrote to many streams takes about as long
as one that wrote to one). Appends that arrive during a commit go into the next one,
so a busy store makes few, large writes. Under an ``interval`` policy an append is
answered once its bytes are written, and :meth:`Committer.sync_now` (run every
interval by the store) makes them durable. :meth:`Committer.close` stops the syncing
threads once the store writes no more.

Each queued item carries a callback the committer runs on the event loop once the
item is written (or failed): it publishes the append (the stream's tail moves), whether
or not its caller is still waiting, so a cancelled caller never leaves the log and the
stream disagreeing. A log whose write or sync fails (the disk full, no file descriptor
left) is cut back to what was written before (:meth:`SegmentLog.write` and
:meth:`SegmentLog.cut_back`): that log's appends in the commit, and those queued after
them, fail with the error, and the next append tries again; other logs are not
touched. Only a log that cannot even be cut back refuses appends until a restart
recovers it. A log keeps its file open only while it is among the
:data:`OPEN_LOGS` written last (synced, then closed, when it leaves them).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

import trio

from .errors import StreamStoreFailedError
from .segments import SegmentLog

__all__ = ["OPEN_LOGS", "SYNC_THREADS", "Committer", "Done", "SyncPolicy"]

T = TypeVar("T")

log = logging.getLogger("sandstream.streams")

SYNC_THREADS: Final = 8
"""The most logs a commit fdatasyncs at once."""
OPEN_LOGS: Final = 64
"""The most logs whose file stays open between commits (the ones written last)."""

Done = Callable[[BaseException | None], None]
"""Run once an item is written (``None``) or could not be (the error)."""


@dataclass(frozen=True, slots=True)
class SyncPolicy:
    """When appends are made durable: ``commit`` (before they are answered, one fsync
    shared by all appends in a commit) or ``interval`` (every ``interval`` seconds;
    an append is answered once written, and a crash may lose the last interval)."""

    mode: Literal["commit", "interval"] = "commit"
    interval: float = 1.0

    @classmethod
    def parse(cls, text: str) -> SyncPolicy:
        """``commit``, or a number of seconds (an ``interval`` policy)."""
        if text == "commit":
            return cls()
        try:
            seconds = float(text)
        except ValueError:
            raise ValueError(f"a sync policy is 'commit' or seconds, not {text!r}") from None
        if not 0 < seconds < float("inf"):
            raise ValueError(f"a sync interval must be > 0 seconds, got {text!r}")
        return cls("interval", seconds)


@dataclass(slots=True)
class _Batch:
    """Queued appends committed together, in the order they came."""

    items: list[tuple[SegmentLog, bytes, Done]] = field(default_factory=list)


class Committer:
    """The store's single writer (see the module docstring)."""

    def __init__(self, policy: SyncPolicy) -> None:
        self.policy = policy
        self._batch = _Batch()
        self._wake = trio.Event()
        self._closed: StreamStoreFailedError | None = None
        self._unsynced: set[SegmentLog] = set()
        self._open: OrderedDict[SegmentLog, None] = OrderedDict()
        """The logs written last, whose file is open (the newest at the end)."""
        self._thread = trio.CapacityLimiter(1)
        self._syncers: ThreadPoolExecutor | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Commit batches until cancelled (what is queued then fails)."""
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                batch, self._batch = self._batch, _Batch()
                await self._commit(batch)
        finally:
            self._closed = StreamStoreFailedError("the stream store is closed")
            batch, self._batch = self._batch, _Batch()
            for _, _, done in batch.items:
                done(self._closed)

    def commit(self, log_: SegmentLog, record: bytes, done: Done) -> None:
        """Queue ``record`` for ``log_``; ``done(None)`` runs once it is written (and,
        under the ``commit`` policy, synced), ``done(error)`` if it cannot be. Raises
        :class:`StreamStoreFailedError` once the store is closed, or ``log_`` cannot
        be written until a restart."""
        self.check(log_)
        self._batch.items.append((log_, record, done))
        self._wake.set()

    def check(self, log_: SegmentLog | None = None) -> None:
        """Raise :class:`StreamStoreFailedError` if the store is closed, or ``log_``
        cannot be written until a restart."""
        if self._closed is not None:
            raise self._closed
        if log_ is not None and log_.broken is not None:
            raise StreamStoreFailedError(
                f"the stream's log cannot be written until a restart: {log_.broken}"
            )

    async def _commit(self, batch: _Batch) -> None:
        by_log: dict[SegmentLog, list[bytes]] = {}
        for log_, record, _ in batch.items:
            by_log.setdefault(log_, []).append(record)
        failed = await trio.to_thread.run_sync(self._write, by_log, limiter=self._thread)
        for log_, error in failed.items():
            log.error("streams: a write to %s failed, its appends fail: %s", log_.directory, error)
        queued = self._batch.items
        if failed:  # appends queued after a failed one were accepted as if it had not
            self._batch.items = [item for item in queued if item[0] not in failed]
            queued = [item for item in queued if item[0] in failed]
        else:
            queued = []
        for log_, _, done in batch.items + queued:
            done(failed.get(log_))

    def _write(self, by_log: dict[SegmentLog, list[bytes]]) -> dict[SegmentLog, OSError]:
        """Write (and under ``commit``, sync) each log's records; the logs that failed,
        each cut back to where it was, with their error."""
        failed: dict[SegmentLog, OSError] = {}
        before = {log_: log_.end for log_ in by_log}
        for log_, records in by_log.items():
            try:
                log_.write(b"".join(records))
            except OSError as refused:
                failed[log_] = refused
        written = [log_ for log_ in by_log if log_ not in failed]
        if self.policy.mode == "commit":
            for log_, unsynced in self._sync(written).items():
                failed[log_] = unsynced
                log_.cut_back(before[log_])
        else:
            self._unsynced.update(written)
        self._keep_open(written)
        return failed

    def _sync(self, logs: Collection[SegmentLog]) -> dict[SegmentLog, OSError]:
        """fdatasync every log of ``logs``, up to :data:`SYNC_THREADS` at once (in the
        committer's worker thread); the ones that failed, with their error."""
        if len(logs) <= 1:
            return {log_: error for log_ in logs if (error := _sync_one(log_)) is not None}
        if self._syncers is None:
            self._syncers = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="streams-sync")
        errors = self._syncers.map(_sync_one, logs)
        return {log_: error for log_, error in zip(logs, errors, strict=True) if error is not None}

    def _keep_open(self, written: list[SegmentLog]) -> None:
        """The logs just written are the newest open; the oldest past :data:`OPEN_LOGS`
        are synced (if they wait for it) and closed."""
        opened = self._open
        for log_ in written:
            opened[log_] = None
            opened.move_to_end(log_)
        while len(opened) > OPEN_LOGS:
            oldest, _ = opened.popitem(last=False)
            if oldest in self._unsynced and _sync_one(oldest) is None:
                self._unsynced.discard(oldest)
            oldest.close()

    async def sync_now(self) -> None:
        """Make every write so far durable (the ``interval`` policy's tick); a log
        that cannot be synced is logged, and tried again at the next tick."""
        logs, self._unsynced = self._unsynced, set()
        if logs:
            failed = await trio.to_thread.run_sync(self._sync, logs, limiter=self._thread)
            for log_, error in failed.items():
                log.error("streams: syncing %s failed: %s", log_.directory, error)
            self._unsynced.update(failed)

    async def close(self) -> None:
        """Stop the threads that sync (once nothing is written any more)."""
        syncers, self._syncers = self._syncers, None
        if syncers is not None:
            await trio.to_thread.run_sync(syncers.shutdown, limiter=self._thread)

    async def exclusive(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread while no commit writes (removing a log)."""
        return await trio.to_thread.run_sync(fn, limiter=self._thread)


def _sync_one(log_: SegmentLog) -> OSError | None:
    try:
        log_.sync()
    except OSError as error:
        return error
    return None
