"""SQLite connections driven from trio: every call runs in a worker thread.

Shared by the chat store (:mod:`sandstream.server.chat.store.sql`) and the session
buffer (:mod:`sandstream.server.sessions.buffer`); each brings its own schema.
:class:`SQLiteDatabase` keeps one writer connection (``BEGIN IMMEDIATE``, one write at a
time) and a pool of readers (WAL); no database call runs on the event loop. Writes
queued while one runs go to the writer's thread together and commit as one transaction,
each in a savepoint of its own: a write that raises is rolled back alone, and the
others see the database as if each had run by itself, in order. One hand-off to a
thread and one commit serve them all, so writes keep up when threads wait long for a
CPU.

Cancellation: a write cancelled while queued never runs. A call that has started runs
to completion in its thread, and the caller sees :class:`trio.Cancelled` at its next
checkpoint without learning the outcome; callers that must know it (a turn's start and
settle) shield the call.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Generic, TypeVar, cast

import trio

from .operations import OperationTimes

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "Migrate", "SQLiteDatabase"]

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT_MS: Final = 10_000
"""How long a connection waits for another process's write lock before failing."""


def _connect(path: Path, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path.resolve().as_uri(),
        uri=True,
        isolation_level=None,
        check_same_thread=False,
        timeout=busy_timeout_ms / 1000,
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


Migrate = Callable[[sqlite3.Connection], object]
"""Brings a database's schema up to date, on the writer connection, outside a transaction."""


class _Write(Generic[T]):
    """One queued :meth:`SQLiteDatabase.write`: its function, then its outcome."""

    __slots__ = ("batch", "error", "fn", "result")

    def __init__(self, fn: Callable[[sqlite3.Connection], T]) -> None:
        self.fn = fn
        self.batch: trio.Event | None = None  # set once taken: its batch is done
        self.result: T | None = None
        self.error: BaseException | None = None


def _transaction(conn: sqlite3.Connection, writes: list[_Write[Any]]) -> list[_Write[Any]]:
    """Run ``writes`` in order in one transaction, each in a savepoint: one that raises
    is rolled back alone. Returns the writes to run again in a new transaction: those
    a failure that ends the whole transaction (SQLite ends it on a full disk, for one)
    undid, and those after it."""
    ran: list[_Write[Any]] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        for index, write in enumerate(writes):
            conn.execute("SAVEPOINT write")
            try:
                write.result = write.fn(conn)
            except BaseException as exc:
                write.error = exc
                if not conn.in_transaction:
                    return ran + writes[index + 1 :]
                conn.execute("ROLLBACK TO write")
            conn.execute("RELEASE write")
            if write.error is None:
                ran.append(write)
        conn.execute("COMMIT")
    except BaseException as exc:  # the transaction itself failed: so did every write in it
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the connection's own failure
                conn.execute("ROLLBACK")
        for write in writes:
            if write.error is None:
                write.result, write.error = None, exc
    return []


class SQLiteDatabase:
    """A SQLite database file in WAL mode, migrated to the current schema by ``migrate``.

    Open it with :meth:`open` (connects and migrates in a worker thread). ``readers``
    bounds the reader connections (and so the concurrent reads). ``page_size``: the
    page size of a file this creates (an existing file keeps its own; ``None``:
    SQLite's default, 4 KiB). Larger pages store large blobs faster: each page of a
    blob's overflow chain is its own WAL frame, write and checkpoint copy.
    """

    def __init__(
        self,
        path: Path,
        *,
        migrate: Migrate,
        readers: int = 4,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        page_size: int | None = None,
    ) -> None:
        if readers < 1:
            raise ValueError(f"readers must be >= 1, got {readers}")
        if page_size is not None and not (
            512 <= page_size <= 65536 and page_size & (page_size - 1) == 0
        ):
            raise ValueError(f"page_size must be a power of two in 512…65536, got {page_size}")
        self.path = path
        self._page_size = page_size
        self._migrate = migrate
        self._busy_timeout_ms = busy_timeout_ms
        self._writer: sqlite3.Connection | None = None
        self._write_lock = threading.Lock()
        self._queued: list[_Write[Any]] = []
        self._running: trio.Event | None = None
        self._read_limiter = trio.CapacityLimiter(readers)
        self._idle_readers: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._closed = False
        self.operations = OperationTimes("sqlite")
        """Its reads' and writes' times and failures (for /metrics)."""

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        migrate: Migrate,
        readers: int = 4,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        page_size: int | None = None,
    ) -> SQLiteDatabase:
        """Create or open the database at ``path``, switch it to WAL, migrate it.

        Raises what ``migrate`` raises (the chat store: ``StoreError`` for a database
        newer than its code) and :class:`sqlite3.Error` / :class:`OSError` if it cannot
        be opened.
        """
        db = cls(
            path,
            migrate=migrate,
            readers=readers,
            busy_timeout_ms=busy_timeout_ms,
            page_size=page_size,
        )
        await trio.to_thread.run_sync(db._open_sync)
        return db

    def _open_sync(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = _connect(self.path, self._busy_timeout_ms)
        try:
            if self._page_size is not None:  # takes effect only on a file still empty
                conn.execute(f"PRAGMA page_size = {self._page_size}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"cannot switch {self.path} to WAL (got {mode})")
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._writer = conn

    # -- calls -----------------------------------------------------------------------

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in a ``BEGIN IMMEDIATE`` transaction, in a worker thread.

        Committed if ``fn`` returns, rolled back if it raises (the exception
        propagates). Writes run one at a time, in the order they were called; those
        queued while one runs go to the thread together, each in a savepoint of one
        transaction (see the module docstring). ``fn`` may run more than once: a
        write undone with its transaction by another's failure runs again.
        """
        with self.operations.timed("write"):
            return await self._write(fn)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        write = _Write(fn)
        self._queued.append(write)
        try:
            while write.batch is None:
                running = self._running
                if running is None:
                    await self._run_queued()
                else:
                    await running.wait()
        except BaseException:
            if write.batch is None:  # cancelled before it was taken: it never runs
                self._queued.remove(write)
            raise
        await write.batch.wait()
        if write.error is not None:
            raise write.error
        return cast(T, write.result)

    async def _run_queued(self) -> None:
        """Take every queued write and run them in the writer's thread."""
        writes, self._queued = self._queued, []
        done = self._running = trio.Event()
        for write in writes:
            write.batch = done
        try:
            await trio.to_thread.run_sync(self._write_sync, writes)
        except BaseException as exc:  # none of them may pass for written
            for write in writes:
                if write.error is None:
                    write.error = exc
            raise
        finally:
            self._running = None
            done.set()

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one read transaction (a consistent snapshot), in a thread."""
        with self.operations.timed("read"):
            return await trio.to_thread.run_sync(self._read_sync, fn, limiter=self._read_limiter)

    async def ping(self, timeout: float) -> None:
        """Run ``SELECT 1`` on a reader: returns if the database file can be read
        (``timeout`` is the reader's own busy timeout here). Raises :class:`sqlite3.Error`."""
        await self.read(lambda conn: conn.execute("SELECT 1").fetchone())

    def _write_sync(self, writes: list[_Write[Any]]) -> None:
        with self._write_lock:
            conn = self._writer
            if conn is None or self._closed:
                for write in writes:
                    write.error = sqlite3.ProgrammingError("the database is closed")
                return
            while writes:
                writes = _transaction(conn, writes)

    def _read_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._take_reader()
        try:
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        finally:
            self._give_back(conn)

    def _take_reader(self) -> sqlite3.Connection:
        with self._pool_lock:
            if self._closed:
                raise sqlite3.ProgrammingError("the database is closed")
            if self._idle_readers:
                return self._idle_readers.pop()
        conn = _connect(self.path, self._busy_timeout_ms)
        conn.execute("PRAGMA query_only = ON")
        return conn

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._pool_lock:
            if self._closed:
                conn.close()
            else:
                self._idle_readers.append(conn)

    # -- closing -----------------------------------------------------------------------

    async def close(self) -> None:
        """Close every connection (waiting for a write in progress). Idempotent."""
        await trio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        with self._write_lock, self._pool_lock:
            if self._closed:
                return
            self._closed = True
            for conn in self._idle_readers:
                conn.close()
            self._idle_readers.clear()
            if self._writer is not None:
                self._writer.close()
                self._writer = None
