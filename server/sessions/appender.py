"""The session buffer's appends, stored by one thread of their own, in group commits.

The event loop hands runs over with :meth:`Appender.submit` (never blocks); the thread
stores everything queued meanwhile in one transaction, across sessions, and reports each
outcome back to the loop with ``run_sync_soon``, in submission order. If a group's
transaction fails, its runs are retried one by one, so only a failing run fails; a
session's later runs then fail with :class:`EarlierAppendFailedError` (they would leave
a gap). Cancellation: none on the thread; :meth:`Appender.close` stores what was
submitted, reports it, then ends the thread.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import trio

from sandstream.server.sqlite import SQLiteDatabase

from .errors import EarlierAppendFailedError

__all__ = ["Appender", "Outcome", "RunJob"]

log = logging.getLogger("sandstream.sessions")

Outcome = int | Exception
"""What a stored run reports: the session's first retained cursor, or why it failed."""

_STOP: Final = None


@dataclass(frozen=True, slots=True)
class RunJob:
    """One run of session ``key``, after its cursor ``after``, to store, and whom to
    tell: ``store(conn)`` does it in the caller's transaction and returns the first
    retained cursor; ``report(outcome)`` is called on the event loop once the
    transaction is over."""

    key: int
    after: int
    store: Callable[[sqlite3.Connection], int]
    report: Callable[[Outcome], object]


class Appender:
    """See the module docstring. Start with :meth:`start` (on the event loop that
    should hear the outcomes), end with :meth:`close`."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self._db = db
        self._jobs: queue.SimpleQueue[RunJob | None] = queue.SimpleQueue()
        self._broken: set[int] = set()
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> None:
        """Start the thread; outcomes are reported on the calling trio run."""
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(
            target=self._run, name="sandstream-session-appender", daemon=True
        )
        self._thread.start()

    def submit(self, job: RunJob) -> None:
        """Queue ``job`` (never blocks). Raises :class:`sqlite3.ProgrammingError` once
        closed (as the database does)."""
        if self._closed or self._thread is None:
            raise sqlite3.ProgrammingError("the session buffer is closed")
        self._jobs.put(job)

    async def close(self) -> None:
        """Store what was submitted (its reports follow on the event loop), then end
        the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._jobs.put(_STOP)
            await trio.to_thread.run_sync(self._thread.join)

    # -- the thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            group = [job]
            stopping = False
            while True:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stopping = True
                    break
                group.append(more)
            outcomes = self._store(group)
            assert self._token is not None
            try:
                self._token.run_sync_soon(_report, group, outcomes)
            except trio.RunFinishedError:
                log.error("the event loop ended before %d appends were reported", len(group))
                return
            if stopping:
                return

    def _store(self, group: list[RunJob]) -> list[Outcome]:
        for job in group:
            if job.after == 0:  # a new session (a key may be reused once one is deleted)
                self._broken.discard(job.key)
        if all(job.key not in self._broken for job in group):
            try:
                return self._db.write_blocking(lambda conn: [job.store(conn) for job in group])
            except Exception as exc:
                if len(group) == 1:
                    self._broken.add(group[0].key)
                    return [exc]
        return [self._store_one(job) for job in group]  # only the failing runs fail

    def _store_one(self, job: RunJob) -> Outcome:
        if job.key in self._broken:
            return EarlierAppendFailedError(
                f"session {job.key}: an earlier append failed; nothing after it is stored"
            )
        try:
            return self._db.write_blocking(job.store)
        except Exception as exc:
            self._broken.add(job.key)
            return exc


def _report(group: list[RunJob], outcomes: list[Outcome]) -> None:
    """Run on the event loop by ``run_sync_soon``, where an exception would end the
    whole trio run: a report that raises (a bug) is logged instead."""
    for job, outcome in zip(group, outcomes, strict=True):
        try:
            job.report(outcome)
        except Exception:
            log.exception("session %d: publishing a stored run failed", job.key)
