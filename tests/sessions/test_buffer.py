"""The SQLite buffer: any split into appends reads back as the same chunks, by cursor."""

from __future__ import annotations

import sqlite3
import tempfile
from functools import partial
from pathlib import Path

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.server.sessions.appender import Outcome
from sandstream.server.sessions.buffer import Run, SessionBuffer
from sandstream.server.sessions.errors import EarlierAppendFailedError


async def append(
    buffer: SessionBuffer, key: int, after: int, data: bytes, count: int, at: int, keep_from: int
) -> int:
    """``append_soon``, waiting for the outcome: the first retained cursor, or raised."""
    outcomes: list[Outcome] = []
    stored = trio.Event()

    def report(outcome: Outcome) -> None:
        outcomes.append(outcome)
        stored.set()

    buffer.append_soon(key, after, data, count, at, keep_from, report)
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
        buffer = await SessionBuffer.open(Path(name))
        try:
            key = await buffer.create("ses_a", 0)
            other = await buffer.create("ses_b", 0)
            last = 0
            for run in appends:
                assert await append(buffer, key, last, b"".join(run), len(run), 0, 1) == 1
                await append(buffer, other, last, b"x\n" * len(run), len(run), 0, 1)
                last += len(run)
            after = data.draw(st.integers(0, last))
            upto = data.draw(st.integers(after, last))
            budget = data.draw(st.integers(1, 200))
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
            assert got == everything[after:upto]
            # retention drops whole runs below the cursor asked to be kept
            keep_from = data.draw(st.integers(1, last))
            first = await append(buffer, key, last, b"end\n", 1, 0, keep_from)
            assert first <= keep_from
            assert _chunks(await buffer.read(key, first - 1, last + 1, 10**6)) == [
                *everything[first - 1 :],
                b"end\n",
            ]
            if first > 1:
                assert await buffer.read(key, first - 2, last + 1, 10**6) == []
        finally:
            await buffer.close()


async def test_a_run_that_fails_fails_alone_and_stops_its_session_only(tmp_path: Path) -> None:
    """Runs handed over together may share a transaction: one that fails (here a
    cursor stored already) fails alone, its session's later runs are refused (they
    would leave a gap), and every other session's runs are stored."""
    buffer = await SessionBuffer.open(tmp_path)
    try:
        a = await buffer.create("ses_a", 0)
        b = await buffer.create("ses_b", 0)
        outcomes: dict[str, Outcome] = {}
        reported = trio.Event()

        def report(name: str, outcome: Outcome) -> None:
            outcomes[name] = outcome
            if len(outcomes) == 5:
                reported.set()

        runs = [
            ("a1", a, 0, b"1\n"),
            ("b1", b, 0, b"x\n"),
            ("a-again", a, 0, b"1 again\n"),  # cursor 1 is stored: fails
            ("a2", a, 1, b"2\n"),
            ("b2", b, 1, b"y\n"),
        ]
        for name, key, after, data in runs:
            buffer.append_soon(key, after, data, 1, 0, 1, partial(report, name))
        with trio.fail_after(10):
            await reported.wait()
        assert outcomes["a1"] == outcomes["b1"] == outcomes["b2"] == 1
        assert isinstance(outcomes["a-again"], sqlite3.IntegrityError)
        assert isinstance(outcomes["a2"], EarlierAppendFailedError)
        assert _chunks(await buffer.read(a, 0, 2, 100)) == [b"1\n"]
        assert _chunks(await buffer.read(b, 0, 2, 100)) == [b"x\n", b"y\n"]
    finally:
        await buffer.close()
