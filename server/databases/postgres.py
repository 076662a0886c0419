"""PostgreSQL connections driven from trio: every call runs in a worker thread.

The chat store's database when ``sandstream serve`` is given ``--database-url``
(:mod:`sandstream.server.chat.store`), shaped as :mod:`sandstream.server.databases.sqlite` is: a
call is a function of a connection, run in one transaction in a worker thread
(``trio.to_thread.run_sync``; psycopg's async API is asyncio's, and no database call
runs on the event loop). psycopg 3 with a ``psycopg_pool.ConnectionPool`` (thread
safe; the worker threads borrow a connection each).

Writes run ``SERIALIZABLE``: they behave as if run one at a time, as SQLite's ``BEGIN
IMMEDIATE`` makes them, so the store's transactions read, decide and write without row
locks; one that loses a race to another replica's fails with a serialization failure (or
a deadlock) before committing anything and is run again, whole (after a short jittered
pause, longer after each loss), up to :data:`WRITE_ATTEMPTS` times. Reads run
``REPEATABLE READ READ ONLY`` (a snapshot). A connection lost in a transaction loses the
transaction (nothing of it is committed); the error propagates
(:class:`psycopg.OperationalError`) and the pool replaces the connection. One found dead
before its transaction began (the server restarted while it was idle) is dropped and the
next one tried.

:class:`PgConnection` gives psycopg's connection the shape the store's SQL is written
for (:class:`sandstream.server.chat.store.database.Connection`): ``?`` placeholders,
rows read by name or position.

Every connection waits at most ``lock_timeout_ms`` for a row lock another session holds
(a replica stuck in a transaction): the write then fails with
:class:`psycopg.errors.LockNotAvailable`, as SQLite's ``busy_timeout`` ends a wait for
its write lock, instead of waiting forever; and the server ends a session of ours left
idle inside a transaction for :data:`IDLE_IN_TRANSACTION_MS`, so that one can never
hold its locks for longer.

Bad input: a malformed URL raises :class:`psycopg.ProgrammingError`, a server that
cannot be reached :class:`psycopg.OperationalError`, both from :meth:`PostgresDatabase.open`.
Cancellation: a call that has started runs to completion in its thread; the caller
sees :class:`trio.Cancelled` without learning the outcome.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import Any, Final, TypeVar

import psycopg
import psycopg.errors
import trio
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool

from .operations import OperationTimes
from .sqlite import DEFAULT_BUSY_TIMEOUT_MS

__all__ = [
    "CONNECT_TIMEOUT",
    "IDLE_IN_TRANSACTION_MS",
    "WRITE_ATTEMPTS",
    "PgConnection",
    "PgRow",
    "PostgresDatabase",
]

T = TypeVar("T")

WRITE_ATTEMPTS: Final = 20
"""How many times a write transaction that loses serialization races is run."""

CONNECT_TIMEOUT: Final = 10
"""Seconds to wait for a connection (the server, or a connection of the pool)."""

IDLE_IN_TRANSACTION_MS: Final = 60_000
"""How long the server lets a session of ours sit idle inside a transaction."""

_RETRY_PAUSE: Final = 0.001
_RETRY_PAUSE_MAX: Final = 0.1
"""Seconds: the first and the longest pause before a write that lost a race runs again."""
_RETRIED: Final = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)


class PgRow:
    """A row read by column name or by position, as :class:`sqlite3.Row` is."""

    __slots__ = ("_names", "_values")

    def __init__(self, values: Sequence[Any], names: dict[str, int]) -> None:
        self._values = values
        self._names = names

    def __getitem__(self, key: int | str) -> Any:
        return self._values[self._names[key] if isinstance(key, str) else key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        return list(self._names)


def _pg_row(cursor: Any) -> RowMaker[PgRow]:
    names = {column.name: i for i, column in enumerate(cursor.description or ())}
    return lambda values: PgRow(values, names)


@lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    """The store's SQL (``?`` placeholders) in psycopg's (``%s``; a ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _binary_bytes(parameters: Sequence[Any]) -> Sequence[Any]:
    """``parameters`` with their ``bytes`` sent as binary (not hex text: half the bytes
    on the wire, no encoding pass over a moved run or a blob)."""
    if not any(type(p) is bytes for p in parameters):
        return parameters
    return [psycopg.Binary(p) if type(p) is bytes else p for p in parameters]


class PgConnection:
    """A psycopg connection in the shape of :class:`sqlite3.Connection` that the chat
    store's SQL uses (``execute``, ``executemany``, ``in_transaction``); ``bytes``
    parameters go and results come in binary format (never hex text)."""

    __slots__ = ("raw",)

    def __init__(self, raw: psycopg.Connection[PgRow]) -> None:
        self.raw = raw

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> psycopg.Cursor[PgRow]:
        return self.raw.execute(_pg_sql(sql), _binary_bytes(parameters), binary=True)

    def executemany(
        self, sql: str, seq_of_parameters: Sequence[Sequence[Any]], /
    ) -> psycopg.Cursor[PgRow]:
        cursor = self.raw.cursor(binary=True)
        cursor.executemany(_pg_sql(sql), [_binary_bytes(p) for p in seq_of_parameters])
        return cursor

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


Migrate = Callable[[PgConnection], object]
"""Brings a database's schema up to date, on a connection outside a transaction."""


class PostgresDatabase:
    """A PostgreSQL database, migrated to the current schema by ``migrate``; see the
    module docstring. Open it with :meth:`open`. ``connections`` bounds the pool (and so
    the concurrent calls); ``lock_timeout_ms`` the wait for a row lock."""

    def __init__(
        self,
        url: str,
        *,
        migrate: Migrate,
        connections: int = 8,
        lock_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> None:
        if connections < 1:
            raise ValueError(f"connections must be >= 1, got {connections}")
        if lock_timeout_ms < 1:
            raise ValueError(f"lock_timeout_ms must be >= 1, got {lock_timeout_ms}")
        self.url = url
        self._migrate = migrate
        self._settings = (
            f"SET lock_timeout = {int(lock_timeout_ms)}; "
            f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}"
        )
        self._pool: ConnectionPool[psycopg.Connection[PgRow]] = ConnectionPool(
            url,
            min_size=1,
            max_size=connections,
            kwargs={"autocommit": True, "row_factory": _pg_row},
            configure=self._configure,
            open=False,
            timeout=CONNECT_TIMEOUT,
            name="sandstream-chat",
        )
        self._connections = connections
        self._limiter = trio.CapacityLimiter(connections)
        self._close_lock = threading.Lock()
        self._closed = False
        self._pinging = False
        self.operations = OperationTimes("postgresql")
        """Its reads' and writes' times and failures (for /metrics)."""

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: Migrate,
        connections: int = 8,
        lock_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> PostgresDatabase:
        """Connect to ``url`` and migrate the database, in a worker thread.

        Raises :class:`psycopg.ProgrammingError` for a malformed URL,
        :class:`psycopg.OperationalError` when the server cannot be reached or refuses
        the login, and what ``migrate`` raises."""
        db = cls(url, migrate=migrate, connections=connections, lock_timeout_ms=lock_timeout_ms)
        await trio.to_thread.run_sync(db._open_sync)
        return db

    def _open_sync(self) -> None:
        # One connection of our own first: its error says what is wrong (the pool's
        # only says it timed out), and the schema is migrated before the pool fills.
        with psycopg.connect(
            self.url, autocommit=True, row_factory=_pg_row, connect_timeout=CONNECT_TIMEOUT
        ) as conn:
            self._configure(conn)
            self._migrate(PgConnection(conn))
        self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)

    def _configure(self, conn: psycopg.Connection[PgRow]) -> None:
        """The session settings of each new connection (see the module docstring)."""
        conn.execute(self._settings)

    # -- calls -----------------------------------------------------------------------

    async def write(self, fn: Callable[[PgConnection], T]) -> T:
        """Run ``fn(conn)`` in one ``SERIALIZABLE`` transaction, in a worker thread; run
        again whole when it loses a serialization race (so ``fn`` writes only through
        ``conn``). Committed if ``fn`` returns, rolled back if it raises."""
        with self.operations.timed("write"):
            return await trio.to_thread.run_sync(self._write_sync, fn, limiter=self._limiter)

    async def read(self, fn: Callable[[PgConnection], T]) -> T:
        """Run ``fn(conn)`` in one read-only snapshot transaction, in a worker thread."""
        with self.operations.timed("read"):
            return await trio.to_thread.run_sync(
                self._transaction,
                fn,
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                limiter=self._limiter,
            )

    def pool_waits(self) -> tuple[int, float]:
        """Calls waiting for a connection of the pool now, and the seconds calls have
        waited for one in all (the pool's own statistics)."""
        stats = self._pool.get_stats()
        return stats.get("requests_waiting", 0), stats.get("requests_wait_ms", 0) / 1000

    def _write_sync(self, fn: Callable[[PgConnection], T]) -> T:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                return self._transaction(fn, "BEGIN ISOLATION LEVEL SERIALIZABLE")
            except _RETRIED:
                if attempt == WRITE_ATTEMPTS:
                    raise
            # Writers that keep losing to each other take turns: a jittered pause,
            # longer after each loss.
            time.sleep(random.uniform(0, min(_RETRY_PAUSE * 2**attempt, _RETRY_PAUSE_MAX)))
        raise AssertionError("unreachable")  # pragma: no cover

    def _transaction(self, fn: Callable[[PgConnection], T], begin: str) -> T:
        if self._closed:
            raise psycopg.InterfaceError("the database is closed")
        for _ in range(self._connections):
            with self._pool.connection() as raw:
                try:
                    raw.execute(begin)
                except psycopg.OperationalError:
                    if raw.broken:  # it died while idle (a server restart): the pool drops it
                        continue
                    raise
                conn = PgConnection(raw)
                try:
                    result = fn(conn)
                except BaseException:
                    if not raw.broken and conn.in_transaction:
                        raw.execute("ROLLBACK")
                    raise
                raw.execute("COMMIT")
                return result
        raise psycopg.OperationalError("no connection of the pool reaches the server")

    async def ping(self, timeout: float) -> None:
        """Borrow a connection (waiting at most ``timeout`` s) and run ``SELECT 1``:
        returns if the server answers. Raises :class:`psycopg.OperationalError`
        (:class:`psycopg_pool.PoolTimeout` when no connection came in time).
        Cancellation: returns at once; the thread ends with its connection's wait, and
        until it has, a ping raises at once (one thread waits on a frozen server, not
        one per ping)."""
        if self._pinging:
            raise psycopg.OperationalError("the previous ping still waits for the server")
        self._pinging = True
        started = threading.Event()
        try:
            await trio.to_thread.run_sync(self._ping_sync, timeout, started, abandon_on_cancel=True)
        finally:
            if not started.is_set():  # cancelled before its thread began
                self._pinging = False

    def _ping_sync(self, timeout: float, started: threading.Event) -> None:
        started.set()
        try:
            self._ping_once(timeout)
        finally:
            self._pinging = False

    def _ping_once(self, timeout: float) -> None:
        if self._closed:
            raise psycopg.InterfaceError("the database is closed")
        for _ in range(2):  # one found dead while idle (a server restart) is dropped
            with self._pool.connection(timeout=timeout) as raw:
                try:
                    raw.execute("SELECT 1")
                    return
                except psycopg.OperationalError:
                    if not raw.broken:
                        raise
        raise psycopg.OperationalError("no connection of the pool reaches the server")

    # -- closing -----------------------------------------------------------------------

    async def close(self) -> None:
        """Close every connection (waiting for the calls in progress). Idempotent."""
        await trio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._pool.close()
