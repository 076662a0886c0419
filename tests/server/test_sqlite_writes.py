"""The SQLite writer: writes queued while one runs commit together, each as if it had
run alone and in order; one that raises, or is cancelled while queued, changes nothing."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from sandstream.server.databases.sqlite import SQLiteDatabase


def _schema(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS rows (n INTEGER PRIMARY KEY, total INTEGER)")


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SQLiteDatabase]:
    database = await SQLiteDatabase.open(tmp_path / "w.sqlite", migrate=_schema)
    try:
        yield database
    finally:
        await database.close()


def _append(n: int) -> Callable[[sqlite3.Connection], int]:
    """A write that depends on every write before it: its row holds the running total."""

    def run(conn: sqlite3.Connection) -> int:
        (total,) = conn.execute("SELECT COALESCE(SUM(n), 0) FROM rows").fetchone()
        conn.execute("INSERT INTO rows (n, total) VALUES (?, ?)", (n, total + n))
        return int(total + n)

    return run


async def _rows(db: SQLiteDatabase) -> list[tuple[int, int]]:
    query = "SELECT n, total FROM rows ORDER BY rowid"
    return await db.read(lambda conn: [(row[0], row[1]) for row in conn.execute(query)])


class _Gate:
    """A first write held in the writer's thread until :meth:`open`, counting the
    commits of the writer connection from then on."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.commits = 0

    def hold(self, conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(self._trace)
        self.entered.set()
        self.release.wait(30)

    def _trace(self, statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            self.commits += 1


async def _queue_behind(db: SQLiteDatabase, gate: _Gate, nursery: trio.Nursery) -> None:
    """Start the held write and wait until its thread runs it."""
    nursery.start_soon(db.write, gate.hold)
    await trio.to_thread.run_sync(gate.entered.wait)


async def test_writes_queued_behind_one_commit_together_in_order(db: SQLiteDatabase) -> None:
    gate = _Gate()
    results: dict[int, int] = {}

    async def append(n: int) -> None:
        results[n] = await db.write(_append(n))

    async with trio.open_nursery() as nursery:
        await _queue_behind(db, gate, nursery)
        for n in range(1, 51):
            nursery.start_soon(append, n)
            await trio.testing.wait_all_tasks_blocked()
        gate.release.set()
    assert gate.commits == 2  # the held write's, then the fifty together
    expected = [(n, n * (n + 1) // 2) for n in range(1, 51)]
    assert await _rows(db) == expected
    assert results == dict(expected)


async def test_a_write_that_raises_is_rolled_back_alone(db: SQLiteDatabase) -> None:
    gate = _Gate()
    outcomes: dict[int, object] = {}

    def failing(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO rows (n, total) VALUES (?, ?)", (1000, 0))
        raise LookupError("refused")

    async def call(key: int, fn: Callable[[sqlite3.Connection], object]) -> None:
        try:
            outcomes[key] = await db.write(fn)
        except LookupError as exc:
            outcomes[key] = exc

    async with trio.open_nursery() as nursery:
        await _queue_behind(db, gate, nursery)
        for key, fn in ((1, _append(1)), (2, failing), (3, _append(3))):
            nursery.start_soon(call, key, fn)
            await trio.testing.wait_all_tasks_blocked()
        gate.release.set()
    assert outcomes[1] == 1 and outcomes[3] == 4
    assert isinstance(outcomes[2], LookupError)
    assert await _rows(db) == [(1, 1), (3, 4)]


async def test_a_write_that_ends_the_transaction_leaves_the_others_committed(
    db: SQLiteDatabase,
) -> None:
    """A failure SQLite ends the whole transaction on undoes the writes before it in
    the batch: they run again, and commit."""
    gate = _Gate()
    outcomes: dict[int, object] = {}

    def ending(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO rows (n, total) VALUES (?, ?)", (1000, 0))
        conn.execute("ROLLBACK")  # as SQLite does on a full disk
        raise sqlite3.OperationalError("database or disk is full")

    async def call(key: int, fn: Callable[[sqlite3.Connection], object]) -> None:
        try:
            outcomes[key] = await db.write(fn)
        except sqlite3.OperationalError as exc:
            outcomes[key] = exc

    async with trio.open_nursery() as nursery:
        await _queue_behind(db, gate, nursery)
        for key, fn in ((1, _append(1)), (2, _append(2)), (3, ending), (4, _append(4))):
            nursery.start_soon(call, key, fn)
            await trio.testing.wait_all_tasks_blocked()
        gate.release.set()
    assert isinstance(outcomes[3], sqlite3.OperationalError)
    assert (outcomes[1], outcomes[2], outcomes[4]) == (1, 3, 7)
    assert await _rows(db) == [(1, 1), (2, 3), (4, 7)]


async def test_a_write_cancelled_while_queued_never_runs(db: SQLiteDatabase) -> None:
    gate = _Gate()
    async with trio.open_nursery() as nursery:
        await _queue_behind(db, gate, nursery)
        queued = trio.CancelScope()
        nursery.start_soon(_cancellable_write, db, queued)
        await trio.testing.wait_all_tasks_blocked()
        queued.cancel()
        nursery.start_soon(db.write, _append(2))
        await trio.testing.wait_all_tasks_blocked()
        gate.release.set()
    assert await _rows(db) == [(2, 2)]


async def _cancellable_write(db: SQLiteDatabase, scope: trio.CancelScope) -> None:
    with scope:
        await db.write(_append(1))


async def test_a_write_to_a_closed_database_raises(db: SQLiteDatabase) -> None:
    await db.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        await db.write(_append(1))
