"""A session's stored runs read by another role (``SessionRuns``): whole runs, in order,
of that session only, between the cursors asked for; what retention dropped is not
there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandstream.server.sessions import SessionBuffer
from tests.sessions.test_buffer import append
from tests.support.streams import open_buffer


def _lines(first: int, count: int) -> list[bytes]:
    return [b'{"n":%d}\n' % n for n in range(first, first + count)]


async def _session(buffer: SessionBuffer, name: str, sizes: list[int], keep_from: int = 1) -> int:
    """A session of runs of ``sizes`` chunks, those below ``keep_from`` dropped at the last."""
    key = await buffer.create(name, 0)
    after = 0
    for index, size in enumerate(sizes):
        keep = keep_from if index == len(sizes) - 1 else 1
        await append(buffer, key, after, b"".join(_lines(after + 1, size)), size, keep)
        after += size
    return key


@pytest.fixture
async def buffer(tmp_path: Path) -> AsyncIterator[SessionBuffer]:
    async with open_buffer(tmp_path / "runner") as buffer:
        yield buffer


async def test_whole_runs_between_two_cursors_are_read_in_order(buffer: SessionBuffer) -> None:
    key = await _session(buffer, "ses_a", [3, 2, 4])
    await _session(buffer, "ses_b", [5, 5])  # never among them
    runs = buffer.stored_runs(key)

    async def spans(after: int, upto: int) -> list[tuple[int, int]]:
        return [(run.first, run.last) for run in await runs.read(after, upto)]

    assert await spans(0, 9) == [(1, 3), (4, 5), (6, 9)]
    assert await spans(3, 9) == [(4, 5), (6, 9)]
    assert await spans(1, 9) == [(2, 3), (4, 5), (6, 9)]  # the first run cut at the cursor
    assert await spans(0, 8) == [(1, 3), (4, 5)]  # the run holding 8 ends past it
    assert await spans(9, 9) == []
    assert [line for run in await runs.read(0, 9) for line in run.lines] == _lines(1, 9)


async def test_runs_retention_dropped_are_not_there(buffer: SessionBuffer) -> None:
    key = await _session(buffer, "ses_a", [2, 2, 2], keep_from=4)
    runs = buffer.stored_runs(key)
    assert await runs.read(0, 6) == []
    assert [(r.first, r.last) for r in await runs.read(2, 6)] == [(3, 4), (5, 6)]
