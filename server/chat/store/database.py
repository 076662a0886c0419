"""What the chat store's SQL needs of a database, whichever backend runs it.

The store's transactions (:mod:`.sql`, :mod:`.moved_runs`, :mod:`.leases`) are written
once, as functions of a :class:`Connection`, and run by a :class:`Database`:
:class:`~sandstream.server.databases.sqlite.SQLiteDatabase` (the embedded default; its
connections are :class:`sqlite3.Connection` itself, so SQLite pays for no layer) or
:class:`~sandstream.server.databases.postgres.PostgresDatabase` (``--database-url``; its
connections adapt psycopg's to the same shape). Both run every call in a worker
thread and every write as one transaction that behaves as if writes ran one at a
time: SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's ``SERIALIZABLE`` (retried whole on a
serialization failure).

The SQL the store writes is the dialect both backends share: ``?`` placeholders,
``INSERT … ON CONFLICT … DO UPDATE``, no two-argument ``MAX``/``MIN``, ``rowid`` only
where the PostgreSQL schema has a column of that name (the insertion order). A row is
read by column name or position. Cancellation: as the backends (a call that started
runs to completion in its thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from sandstream.server.databases import OperationTimes

__all__ = ["Connection", "Cursor", "Database"]

T = TypeVar("T")


class Cursor(Protocol):
    """The result of :meth:`Connection.execute`."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A connection inside one of the :class:`Database`'s transactions."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, seq_of_parameters: Sequence[Sequence[Any]], /) -> Cursor: ...

    @property
    def in_transaction(self) -> bool: ...


class Database(Protocol):
    """A database the chat store runs its transactions on, in worker threads; its
    calls timed in ``operations``."""

    operations: OperationTimes

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` in one write transaction, committed if it returns, rolled back
        if it raises. ``fn`` may run more than once (PostgreSQL retries a transaction
        that lost a serialization race), so it only writes through ``conn``."""
        ...

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` in one read-only transaction (a consistent snapshot)."""
        ...

    async def ping(self, timeout: float) -> None:
        """Return once the database answers a trivial query (within ``timeout`` s where
        the backend can wait for a connection); raise the backend's error if not."""
        ...

    async def close(self) -> None:
        """Close every connection. Idempotent."""
        ...
