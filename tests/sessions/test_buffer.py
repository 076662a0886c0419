"""The session buffer: any split into appends reads back as the same chunks, by cursor,
from memory or from the log after a restart; retention drops whole runs."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.server.sessions.buffer import BUFFER_FILE, Outcome, Run, SessionBuffer
from sandstream.server.streams import StreamClosedError
from tests.support.streams import open_buffer


async def append(
    buffer: SessionBuffer, key: int, after: int, data: bytes, count: int, keep_from: int
) -> int:
    """``append_soon``, waiting for the outcome: the first retained cursor, or raised."""
    outcomes: list[Outcome] = []
    stored = trio.Event()

    def report(outcome: Outcome) -> None:
        outcomes.append(outcome)
        stored.set()

    buffer.append_soon(key, after, data, count, keep_from, report)
    await stored.wait()
    if isinstance(outcomes[0], Exception):
        raise outcomes[0]
    return outcomes[0]


runs = st.lists(
    st.lists(
        st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"") + b"\n"), min_size=1, max_size=6
    ),
    min_size=1,
    max_size=8,
)


def _chunks(runs: list[Run]) -> list[bytes]:
    return [chunk for run in runs for chunk in run.lines]


@settings(max_examples=40)
@given(runs, st.data())
async def test_reads_after_any_cursor_return_exactly_the_chunks_after_it(
    appends: list[list[bytes]], data: st.DataObject
) -> None:
    everything = [chunk for run in appends for chunk in run]
    with tempfile.TemporaryDirectory() as name:
        async with open_buffer(Path(name)) as buffer:
            key = await buffer.create("ses_a", 0)
            other = await buffer.create("ses_b", 0)
            last = 0
            for run in appends:
                assert await append(buffer, key, last, b"".join(run), len(run), 1) == 1
                await append(buffer, other, last, b"x\n" * len(run), len(run), 1)
                last += len(run)
            after = data.draw(st.integers(0, last))
            upto = data.draw(st.integers(after, last))
            budget = data.draw(st.integers(1, 200))
            assert await _read(buffer, key, after, upto, budget) == everything[after:upto]
        # after a restart the runs are found from the log alone
        async with open_buffer(Path(name)) as buffer:
            (row, _) = await buffer.sessions()
            assert (row.first_cursor, row.last_cursor) == (1, last)  # stored as running
            assert await _read(buffer, key, after, upto, budget) == everything[after:upto]
            # retention drops whole runs below the cursor asked to be kept
            keep_from = data.draw(st.integers(1, last))
            first = await append(buffer, key, last, b"end\n", 1, keep_from)
            assert first <= keep_from
            assert _chunks(await buffer.read(key, first - 1, last + 1, 10**6)) == [
                *everything[first - 1 :],
                b"end\n",
            ]
            if first > 1:
                assert await buffer.read(key, first - 2, last + 1, 10**6) == []


async def _read(buffer: SessionBuffer, key: int, after: int, upto: int, budget: int) -> list[bytes]:
    got: list[bytes] = []
    cursor = after
    while cursor < upto:
        batch = await buffer.read(key, cursor, upto, budget)
        assert batch, "a read with chunks left returns at least one run"
        assert sum(run.size for run in batch) <= budget or len(batch) == 1
        for run in batch:  # consecutive, each its own bytes split
            assert run.first == cursor + 1 and run.count == len(run.lines)
            assert run.data == b"".join(run.lines) and run.size == len(run.data)
            got += run.lines
            cursor = run.last
    return got


async def test_an_ended_session_is_closed_stream_and_deleted_with_it(tmp_path: Path) -> None:
    async with open_buffer(tmp_path) as buffer:
        key = await buffer.create("ses_a", 5)
        await append(buffer, key, 0, b"1\n2\n", 2, 1)
        await buffer.finish(key, "completed", 10, b"2\n", 1, 2)
        stream = buffer.stream(key)
        assert stream.closed and stream.tail > 0
        with pytest.raises(StreamClosedError):
            await append(buffer, key, 2, b"3\n", 1, 1)
        assert await buffer.delete_ended_before(11) == ["ses_a"]
        assert stream.removed
        assert not any((tmp_path / "streams" / "logs").iterdir())


async def test_a_stream_left_by_a_stop_between_deleting_its_session_and_it_is_deleted(
    tmp_path: Path,
) -> None:
    async with open_buffer(tmp_path) as buffer:
        for session_id in ("ses_kept", "ses_gone"):
            key = await buffer.create(session_id, 5)
            await append(buffer, key, 0, b"1\n", 1, 1)
            await buffer.finish(key, "completed", 10, b"1\n", 1, 1)
    with sqlite3.connect(tmp_path / BUFFER_FILE) as conn:  # the row deleted, then a stop
        conn.execute("DELETE FROM sessions WHERE id = 'ses_gone'")
    assert len(list((tmp_path / "streams" / "logs").iterdir())) == 2
    async with open_buffer(tmp_path) as buffer:
        rows = await buffer.sessions()
        assert [row.id for row in rows] == ["ses_kept"]
        assert len(list((tmp_path / "streams" / "logs").iterdir())) == 1
        runs = await buffer.read(rows[0].key, 0, 1, 1024)
        assert [run.data for run in runs] == [b"1\n"]


async def test_an_older_buffers_chunks_move_to_the_sessions_streams(tmp_path: Path) -> None:
    """A data dir of a buffer that kept chunks in SQLite (table ``chunks``, a row per
    run keyed ``session_key * 2**32 + first cursor``) opens with every session readable
    from its stream, the ended ones closed, and the table gone."""
    with sqlite3.connect(tmp_path / "sessions.sqlite3") as conn:
        conn.execute(
            "CREATE TABLE sessions (key INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,"
            " state TEXT NOT NULL, created_at INTEGER NOT NULL, ended_at INTEGER,"
            " terminal BLOB, first_cursor INTEGER NOT NULL DEFAULT 1,"
            " last_cursor INTEGER NOT NULL DEFAULT 0)"
        )
        conn.execute(
            "CREATE TABLE chunks (id INTEGER PRIMARY KEY, count INTEGER NOT NULL,"
            " chunk BLOB NOT NULL, created_at INTEGER NOT NULL)"
        )
        conn.execute(
            "INSERT INTO sessions VALUES (1, 'ses_done', 'completed', 0, 5, ?, 1, 3)", (b"3\n",)
        )
        conn.execute("INSERT INTO sessions VALUES (2, 'ses_live', 'running', 0, NULL, NULL, 1, 1)")
        for key, first, data in ((1, 1, b"1\n2\n"), (1, 3, b"3\n"), (2, 1, b"x\n")):
            conn.execute(
                "INSERT INTO chunks VALUES (?, ?, ?, 0)",
                ((key << 32) + first, data.count(b"\n"), data),
            )
    async with open_buffer(tmp_path) as buffer:
        done, live = await buffer.sessions()
        assert (done.id, done.last_cursor, live.id, live.last_cursor) == (
            "ses_done",
            3,
            "ses_live",
            1,
        )
        assert _chunks(await buffer.read(done.key, 0, 3, 100)) == [b"1\n", b"2\n", b"3\n"]
        assert buffer.stream(done.key).closed and not buffer.stream(live.key).closed
        assert await append(buffer, live.key, 1, b"y\n", 1, 1) == 1
        assert _chunks(await buffer.read(live.key, 0, 2, 100)) == [b"x\n", b"y\n"]
    with sqlite3.connect(tmp_path / "sessions.sqlite3") as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "chunks" not in tables
