"""SQLite connections driven from trio: every call runs in a worker thread.

Shared by the chat store (:mod:`sandstream.server.chat.store.sql`) and the session
buffer (:mod:`sandstream.server.sessions.buffer`); each brings its own schema.
:class:`SQLiteDatabase` keeps one writer connection (``BEGIN IMMEDIATE``, one write at a
time) and a pool of readers (WAL); no database call runs on the event loop.

Cancellation: a call that has started runs to completion in its thread, and the caller
sees :class:`trio.Cancelled` at its next checkpoint without learning the outcome; callers
that must know it (a turn's start and settle) shield the call.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

import trio

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
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(readers)
        self._idle_readers: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._closed = False

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
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction, in a worker thread.

        Committed if ``fn`` returns, rolled back if it raises (the exception
        propagates). Writes run one at a time.
        """
        return await trio.to_thread.run_sync(self.write_blocking, fn, limiter=self._write_limiter)

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one read transaction (a consistent snapshot), in a thread."""
        return await trio.to_thread.run_sync(self._read_sync, fn, limiter=self._read_limiter)

    def write_blocking(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """:meth:`write` for a thread of the caller's own: runs ``fn(conn)`` in one
        ``BEGIN IMMEDIATE`` transaction in the calling thread, which it blocks. Never
        call it on the event loop."""
        with self._write_lock:
            conn = self._writer
            if conn is None or self._closed:
                raise sqlite3.ProgrammingError("the database is closed")
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

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
