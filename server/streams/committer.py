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
stream disagreeing. A write that fails stops the committer: that batch and every later
:meth:`commit` raise :class:`StreamStoreFailedError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

import trio

from .errors import StreamStoreFailedError
from .segments import SegmentLog

__all__ = ["SYNC_THREADS", "Commit", "Committer", "SyncPolicy"]

T = TypeVar("T")

log = logging.getLogger("sandstream.streams")

SYNC_THREADS: Final = 8
"""The most logs a commit fdatasyncs at once."""


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
class Commit:
    """Queued appends committed together; :meth:`wait` for the outcome."""

    items: list[tuple[SegmentLog, bytes, Callable[[BaseException | None], None]]] = field(
        default_factory=list
    )
    done: trio.Event = field(default_factory=trio.Event)
    error: BaseException | None = None

    async def wait(self) -> None:
        """Return once committed; raise :class:`StreamStoreFailedError` if it failed."""
        await self.done.wait()
        if self.error is not None:
            raise StreamStoreFailedError(f"the append was not stored: {self.error}")


class Committer:
    """The store's single writer (see the module docstring)."""

    def __init__(self, policy: SyncPolicy) -> None:
        self.policy = policy
        self._batch = Commit()
        self._wake = trio.Event()
        self._failed: BaseException | None = None
        self._unsynced: set[SegmentLog] = set()
        self._thread = trio.CapacityLimiter(1)
        self._syncers: ThreadPoolExecutor | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Commit batches until cancelled (what is queued then fails)."""
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                batch, self._batch = self._batch, Commit()
                await self._commit(batch)
        finally:
            self._fail(StreamStoreFailedError("the stream store is closed"))

    def commit(
        self, log_: SegmentLog, record: bytes, done: Callable[[BaseException | None], None]
    ) -> Commit:
        """Queue ``record`` for ``log_``; ``done(None)`` runs once it is written (and,
        under the ``commit`` policy, synced), ``done(error)`` if it cannot be. Raises
        :class:`StreamStoreFailedError` once the store has stopped writing."""
        self.check()
        self._batch.items.append((log_, record, done))
        self._wake.set()
        return self._batch

    def check(self) -> None:
        """Raise :class:`StreamStoreFailedError` if the store has stopped writing."""
        if self._failed is not None:
            raise StreamStoreFailedError(str(self._failed))

    async def _commit(self, batch: Commit) -> None:
        by_log: dict[SegmentLog, list[bytes]] = {}
        for log_, record, _ in batch.items:
            by_log.setdefault(log_, []).append(record)
        try:
            await trio.to_thread.run_sync(self._write, by_log, limiter=self._thread)
        except OSError as error:
            log.error("streams: a write failed, the store takes no more writes: %s", error)
            self._fail(error)
            _finish(batch, error)
            return
        _finish(batch, None)

    def _write(self, by_log: dict[SegmentLog, list[bytes]]) -> None:
        for log_, records in by_log.items():
            log_.write(b"".join(records))
        if self.policy.mode == "commit":
            self._sync(by_log.keys())
        else:
            self._unsynced.update(by_log)

    def _sync(self, logs: Collection[SegmentLog]) -> None:
        """fdatasync every log of ``logs``, up to :data:`SYNC_THREADS` at once (in the
        committer's worker thread); raises the first failure."""
        if len(logs) == 1:
            for log_ in logs:
                log_.sync()
            return
        if self._syncers is None:
            self._syncers = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="streams-sync")
        for _ in self._syncers.map(SegmentLog.sync, logs):
            pass

    async def sync_now(self) -> None:
        """Make every write so far durable (the ``interval`` policy's tick)."""
        logs, self._unsynced = self._unsynced, set()
        if logs:
            await trio.to_thread.run_sync(self._sync, logs, limiter=self._thread)

    async def close(self) -> None:
        """Stop the threads that sync (once nothing is written any more)."""
        syncers, self._syncers = self._syncers, None
        if syncers is not None:
            await trio.to_thread.run_sync(syncers.shutdown, limiter=self._thread)

    async def exclusive(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread while no commit writes (removing a log)."""
        return await trio.to_thread.run_sync(fn, limiter=self._thread)

    def _fail(self, error: BaseException) -> None:
        if self._failed is None:
            self._failed = error
        batch, self._batch = self._batch, Commit()
        _finish(batch, self._failed)


def _finish(batch: Commit, error: BaseException | None) -> None:
    batch.error = error
    for _, _, done in batch.items:
        done(error)
    batch.done.set()
