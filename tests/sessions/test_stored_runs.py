"""A session's stored runs read in SQL by another database (``SessionRuns``,
``AttachedRuns``): whole runs, in order, of that session only, between the cursors
asked for; the buffer attached once and read-only."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandstream.server.sessions import AttachedRuns, Run, SessionBuffer
from sandstream.server.sqlite import SQLiteDatabase
from tests.sessions.test_buffer import append


def _lines(first: int, count: int) -> list[bytes]:
    return [b'{"n":%d}\n' % n for n in range(first, first + count)]


async def _session(buffer: SessionBuffer, name: str, sizes: list[int], keep_from: int = 1) -> int:
    """A session of runs of ``sizes`` chunks, those below ``keep_from`` dropped at the last."""
    key = await buffer.create(name, 0)
    after = 0
    for index, size in enumerate(sizes):
        keep = keep_from if index == len(sizes) - 1 else 1
        await append(buffer, key, after, b"".join(_lines(after + 1, size)), size, 0, keep)
        after += size
    return key


def _copy_table(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS copy (first INTEGER, last INTEGER, chunks BLOB)")


@pytest.fixture
async def other(tmp_path: Path) -> AsyncIterator[SQLiteDatabase]:
    """Another role's database, with a table to copy runs into."""
    db = await SQLiteDatabase.open(tmp_path / "other.sqlite3", migrate=_copy_table)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
async def buffer(tmp_path: Path) -> AsyncIterator[SessionBuffer]:
    buffer = await SessionBuffer.open(tmp_path / "runner")
    try:
        yield buffer
    finally:
        await buffer.close()


async def _copied(db: SQLiteDatabase, runs: AttachedRuns, after: int, upto: int) -> list[Run]:
    """What ``INSERT … SELECT`` copies of ``runs.select(after, upto)``, as runs."""

    def copy(conn: sqlite3.Connection) -> list[Run]:
        conn.execute("DELETE FROM copy")
        select, params = runs.select(after, upto)
        conn.execute(
            f"INSERT INTO copy SELECT first_cursor, last_cursor, chunks FROM ({select})", params
        )
        rows = conn.execute("SELECT first, last, chunks FROM copy ORDER BY rowid").fetchall()
        return [Run(first, data, last - first + 1) for first, last, data in rows]

    return await db.write(copy)


async def test_whole_runs_between_two_cursors_are_selected_in_order(
    buffer: SessionBuffer, other: SQLiteDatabase
) -> None:
    key = await _session(buffer, "ses_a", [3, 2, 4])
    await _session(buffer, "ses_b", [5, 5])  # never among them
    runs = await buffer.stored_runs(key).attach(other)

    async def firsts(after: int, upto: int) -> list[tuple[int, int]]:
        return [(run.first, run.last) for run in await _copied(other, runs, after, upto)]

    assert await firsts(0, 9) == [(1, 3), (4, 5), (6, 9)]
    assert await firsts(3, 9) == [(4, 5), (6, 9)]
    assert await firsts(1, 9) == [(4, 5), (6, 9)]  # the run holding 2 starts below it
    assert await firsts(0, 8) == [(1, 3), (4, 5)]  # the run holding 8 ends past it
    assert await firsts(9, 9) == []
    copied = await _copied(other, runs, 0, 9)
    assert [line for run in copied for line in run.lines] == _lines(1, 9)


async def test_the_run_holding_a_cursor_is_found_and_read(
    buffer: SessionBuffer, other: SQLiteDatabase
) -> None:
    key = await _session(buffer, "ses_a", [3, 2, 4])
    runs = await buffer.stored_runs(key).attach(other)

    def look(conn: sqlite3.Connection) -> tuple[list[int | None], Run | None, Run | None]:
        starts = [runs.run_start(conn, cursor) for cursor in (1, 2, 4, 5, 9, 12)]
        return starts, runs.run(conn, 4), runs.run(conn, 5)

    starts, run, none = await other.write(look)
    assert starts == [1, 1, 4, 4, 6, 6]  # 12 is not stored: the newest run below it
    assert run is not None and (run.first, run.last, run.lines) == (4, 5, _lines(4, 2))
    assert none is None


async def test_runs_retention_dropped_are_not_there(
    buffer: SessionBuffer, other: SQLiteDatabase
) -> None:
    key = await _session(buffer, "ses_a", [2, 2, 2], keep_from=4)
    runs = await buffer.stored_runs(key).attach(other)
    assert await other.write(lambda conn: runs.run_start(conn, 2)) is None
    assert [(r.first, r.last) for r in await _copied(other, runs, 0, 6)] == [(3, 4), (5, 6)]


async def test_the_buffer_is_attached_once_and_read_only(
    buffer: SessionBuffer, other: SQLiteDatabase
) -> None:
    key = await _session(buffer, "ses_a", [1])
    await buffer.stored_runs(key).attach(other)
    await buffer.stored_runs(key).attach(other)

    def attached(conn: sqlite3.Connection) -> list[str]:
        return [
            row[1] for row in conn.execute("PRAGMA database_list") if row[1] not in ("main", "temp")
        ]

    (schema,) = await other.write(attached)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        await other.write(lambda conn: conn.execute(f"DELETE FROM {schema}.chunks"))
    assert await buffer.read(key, 0, 1, 1000) != []
