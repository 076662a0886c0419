"""The sink copying an in-process session buffer's runs (``StoredRuns``): exactly the
chunks asked for, once, whatever was moved before; refused when the buffer no longer
(or not yet) holds them, or when fenced."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.server.chat.mover import FencedError, StoredRunsMissingError
from sandstream.server.chat.store.database import Database
from sandstream.server.chat.store.moved_runs import Batch, MovedChunks, StoredRuns
from sandstream.server.sessions import SessionBuffer
from tests.chat.mover_harness import open_chat_db
from tests.sessions.test_buffer import append
from tests.support.streams import open_buffer

pytestmark = pytest.mark.usefixtures("chat_database")

_numbers = itertools.count()


@dataclass
class Stores:
    buffer: SessionBuffer
    chat: Database
    sink: MovedChunks


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[Stores]:
    async with open_buffer(tmp_path / "runner") as buffer:
        chat = await open_chat_db(tmp_path / "chat.sqlite3")
        try:
            yield Stores(buffer, chat, MovedChunks(chat))
        finally:
            await chat.close()


async def store_runs(buffer: SessionBuffer, runs: list[list[bytes]], keep_from: int = 1) -> int:
    """A new session in ``buffer`` holding ``runs`` (each one append), the runs below
    cursor ``keep_from`` dropped by retention as the last one is stored; its key."""
    key = await buffer.create(f"ses_{next(_numbers)}", 0)
    after = 0
    for index, run in enumerate(runs):
        keep = keep_from if index == len(runs) - 1 else 1
        await append(buffer, key, after, b"".join(run), len(run), keep)
        after += len(run)
    return key


def lines(count: int, start: int = 1) -> list[bytes]:
    return [b'{"n":%d}\n' % n for n in range(start, start + count)]


runs_strategy = st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=6)


@settings(max_examples=30, deadline=None)
@given(sizes=runs_strategy, data=st.data())
async def test_stored_runs_are_moved_exactly_once_after_any_earlier_move(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], data: st.DataObject
) -> None:
    tmp = tmp_path_factory.mktemp("stored")
    everything = lines(sum(sizes))
    runs, at = [], 0
    for size in sizes:
        runs.append(everything[at : at + size])
        at += size
    before = data.draw(st.integers(min_value=0, max_value=len(everything)), label="moved before")
    async with open_buffer(tmp / "runner") as buffer:
        chat = await open_chat_db(tmp / "chat.sqlite3")
        try:
            await _move_twice(buffer, MovedChunks(chat), runs, everything, before, data)
        finally:
            await chat.close()


async def _move_twice(
    buffer: SessionBuffer,
    sink: MovedChunks,
    runs: list[list[bytes]],
    everything: list[bytes],
    before: int,
    data: st.DataObject,
) -> None:
    key = await store_runs(buffer, runs)
    if before:  # bytes from another source, which may end inside a stored run
        await sink.move("ses_x", 1, Batch.of(1, everything[:before]))
    first = data.draw(st.integers(min_value=1, max_value=before + 1), label="first")
    await sink.move("ses_x", 1, StoredRuns(buffer.stored_runs(key), first, len(everything)))
    await sink.move("ses_x", 1, StoredRuns(buffer.stored_runs(key), 1, len(everything)))  # again
    assert await sink.read("ses_x") == everything
    assert await sink.last_chunk("ses_x") == (len(everything), everything[-1])


async def test_stored_runs_are_kept_as_the_buffer_stored_them(stores: Stores) -> None:
    runs = [lines(3), lines(2, 4), lines(4, 6)]
    key = await store_runs(stores.buffer, runs)
    await stores.sink.move("ses_a", 1, StoredRuns(stores.buffer.stored_runs(key), 1, 5))
    await stores.sink.move("ses_a", 1, StoredRuns(stores.buffer.stored_runs(key), 6, 9))
    rows = await stores.sink.fold("ses_a", list)
    assert rows == [b"".join(run) for run in runs]


async def test_chunks_retention_dropped_are_refused_and_nothing_is_written(
    stores: Stores,
) -> None:
    key = await store_runs(stores.buffer, [lines(2), lines(2, 3), lines(2, 5)], keep_from=4)
    with pytest.raises(StoredRunsMissingError):
        await stores.sink.move("ses_a", 1, StoredRuns(stores.buffer.stored_runs(key), 1, 6))
    assert await stores.sink.read("ses_a") == []
    # the rest is there: a mover that had moved 1…2 before goes on
    await stores.sink.move("ses_a", 1, Batch.of(1, lines(2)))
    await stores.sink.move("ses_a", 1, StoredRuns(stores.buffer.stored_runs(key), 3, 6))
    assert await stores.sink.read("ses_a") == lines(6)


async def test_chunks_not_stored_yet_are_refused_and_nothing_is_written(stores: Stores) -> None:
    key = await store_runs(stores.buffer, [lines(3)])
    with pytest.raises(StoredRunsMissingError):
        await stores.sink.move("ses_a", 1, StoredRuns(stores.buffer.stored_runs(key), 1, 4))
    assert await stores.sink.read("ses_a") == []


async def test_a_fenced_writer_copies_nothing(stores: Stores) -> None:
    key = await store_runs(stores.buffer, [lines(3)])
    await stores.sink.fence("ses_a", 2)
    with pytest.raises(FencedError):
        await stores.sink.move("ses_a", 1, StoredRuns(stores.buffer.stored_runs(key), 1, 3))
    assert await stores.sink.read("ses_a") == []
