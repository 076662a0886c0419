"""Leases (SQLite and a real Redis) and the fenced sink: NX, renew and release by the
holder only, generations that only grow, expiry, fencing, idempotent moves."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.support.redis_server import open_redis_server
from sandstream.server.chat.mover import (
    ChunkGapError,
    ChunkShapeError,
    FencedError,
    Lease,
    RedisLease,
    open_lease,
)
from sandstream.server.chat.mover.lease import redis_keys
from sandstream.server.chat.store.database import Database
from sandstream.server.chat.store.leases import DatabaseLease
from sandstream.server.chat.store.migrations import MIGRATIONS, migrate
from sandstream.server.chat.store.moved_runs import Batch, MovedChunks
from tests.chat.mover_harness import LeaseKind, open_chat_db

pytestmark = pytest.mark.usefixtures("chat_database")

TTL = 0.3


@pytest.fixture(params=["sqlite", "redis"])
async def lease(request: pytest.FixtureRequest, db: Database) -> AsyncIterator[Lease]:
    kind: LeaseKind = request.param
    if kind == "sqlite":
        yield DatabaseLease(db)
        return
    async with (
        open_redis_server() as server,
        open_lease(server.url, db) as redis_lease,
    ):
        assert isinstance(redis_lease, RedisLease)
        yield redis_lease


async def wait_acquired(lease: Lease, session_id: str, owner: str, ttl: float) -> int:
    """Acquire once the holder's lease has expired (polled, under a deadline)."""
    with trio.fail_after(10):
        while (generation := await lease.acquire(session_id, owner, ttl)) is None:
            await trio.sleep(0.02)
    return generation


async def test_one_owner_at_a_time_and_generations_only_grow(lease: Lease) -> None:
    first = await lease.acquire("ses_a", "replica-1", 30)
    assert first == 1
    assert await lease.acquire("ses_a", "replica-2", 30) is None
    assert await lease.acquire("ses_a", "replica-1", 30) is None  # NX: even its holder
    assert await lease.acquire("ses_b", "replica-2", 30) == 1  # per session
    await lease.release("ses_a", "replica-1", first)
    second = await lease.acquire("ses_a", "replica-2", 30)
    assert second == 2
    await lease.release("ses_a", "replica-2", second)
    assert await lease.acquire("ses_a", "replica-1", 30) == 3


async def test_only_the_holder_of_the_generation_renews_or_releases(lease: Lease) -> None:
    generation = await lease.acquire("ses_a", "replica-1", 30)
    assert generation is not None
    assert await lease.renew("ses_a", "replica-1", generation, 30)
    assert not await lease.renew("ses_a", "replica-2", generation, 30)
    assert not await lease.renew("ses_a", "replica-1", generation + 1, 30)
    await lease.release("ses_a", "replica-2", generation)  # not its: nothing happens
    await lease.release("ses_a", "replica-1", generation - 1)
    assert await lease.acquire("ses_a", "replica-2", 30) is None
    assert await lease.renew("ses_a", "replica-1", generation, 30)


async def test_an_expired_lease_is_lost_and_a_new_claim_fences_the_old_one(lease: Lease) -> None:
    old = await lease.acquire("ses_a", "replica-1", TTL)
    assert old is not None
    new = await wait_acquired(lease, "ses_a", "replica-2", 30)
    assert new > old
    assert not await lease.renew("ses_a", "replica-1", old, 30)
    # the same replica claiming again gets a new generation; the old one stays dead
    await lease.release("ses_a", "replica-2", new)
    again = await lease.acquire("ses_a", "replica-1", 30)
    assert again is not None and again > new
    assert not await lease.renew("ses_a", "replica-1", old, 30)
    await lease.release("ses_a", "replica-1", old)
    assert await lease.renew("ses_a", "replica-1", again, 30)


async def test_an_expired_lease_cannot_be_renewed_even_unclaimed(lease: Lease) -> None:
    generation = await lease.acquire("ses_a", "replica-1", TTL)
    assert generation is not None
    await trio.sleep(TTL * 2)  # past its expiry (a lower bound: no race)
    assert not await lease.renew("ses_a", "replica-1", generation, 30)
    assert await lease.acquire("ses_a", "replica-2", 30) == generation + 1


async def test_bad_ttls_are_refused(lease: Lease) -> None:
    for ttl in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ttl"):
            await lease.acquire("ses_a", "replica-1", ttl)


async def test_redis_lease_keys_follow_the_seed(db: Database) -> None:
    async with open_redis_server() as server, open_lease(server.url, db) as lease:
        assert isinstance(lease, RedisLease)
        redis = lease.redis
        generation = await lease.acquire("ses_a", "replica-1", 30)
        assert generation is not None
        owner, counter = redis_keys("ses_a")
        assert (owner, counter) == ("sandbox:{ses_a}:owner", "sandbox:{ses_a}:generation")
        assert await redis.get(owner) == b"replica-1"
        assert await redis.get(counter) == b"%d" % generation
        assert 0 < await redis.pttl(owner) <= 30_000
        await lease.release("ses_a", "replica-1", generation)
        assert await redis.exists([owner]) == 0
        assert await redis.get(counter) == b"1"  # kept: generations only grow


async def test_open_lease_refuses_a_bad_url(db: Database) -> None:
    with pytest.raises(ValueError, match="redis://"):
        async with open_lease("http://localhost:6379", db):
            pass
    async with open_lease(None, db) as lease:
        assert isinstance(lease, DatabaseLease)


# -- the sink ------------------------------------------------------------------------


def chunk(cursor: int) -> bytes:
    return b'{"n":%d}\n' % cursor


def lines(first: int, last: int) -> list[bytes]:
    return [chunk(cursor) for cursor in range(first, last + 1)]


def chunks(first: int, last: int) -> Batch:
    return Batch.of(first, lines(first, last))


async def test_moves_are_idempotent_by_session_and_cursor(db: Database) -> None:
    sink = MovedChunks(db)
    assert await sink.last_cursor("ses_a") == 0
    assert await sink.last_chunk("ses_a") is None
    await sink.move("ses_a", 1, chunks(1, 5))
    await sink.move("ses_a", 1, chunks(3, 8))  # overlapping: moved twice, stored once
    await sink.move("ses_a", 1, chunks(1, 8))
    await sink.move("ses_b", 1, chunks(1, 2))
    assert await sink.read("ses_a") == lines(1, 8)
    assert await sink.last_cursor("ses_a") == 8
    assert await sink.last_chunk("ses_a") == (8, b'{"n":8}\n')
    assert await sink.read("ses_b") == lines(1, 2)


async def test_a_batch_that_would_leave_a_gap_is_refused_whole(db: Database) -> None:
    sink = MovedChunks(db)
    await sink.move("ses_a", 1, chunks(1, 3))
    with pytest.raises(ChunkGapError):
        await sink.move("ses_a", 1, chunks(5, 6))
    with pytest.raises(ChunkGapError):
        await sink.move("ses_a", 1, Batch.of(0, [b"x\n"]))
    assert await sink.last_cursor("ses_a") == 3


@pytest.mark.parametrize(
    "bad",
    [
        Batch(4, b"x\nno newline", 2),
        Batch(4, b"two\nlines\n", 1),
        Batch(4, b"x\n", 2),
        Batch(4, "text\n", 1),  # type: ignore[arg-type]
    ],
)
async def test_a_batch_that_is_not_its_count_of_whole_lines_is_refused_whole(
    db: Database, bad: Batch
) -> None:
    sink = MovedChunks(db)
    await sink.move("ses_a", 1, chunks(1, 3))
    with pytest.raises(ChunkShapeError):
        await sink.move("ses_a", 1, bad)
    assert await sink.read("ses_a") == lines(1, 3)


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(
        st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"\r") + b"\n"),
        min_size=1,
        max_size=40,
    ),
    windows=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=12),
)
def test_any_overlapping_moves_store_each_chunk_once_in_order(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], windows: list[tuple[int, int]]
) -> None:
    """Batches moved in any order of overlapping windows (a takeover resends what it
    read): what is stored is every chunk up to the highest moved, once, in order."""

    async def scenario() -> tuple[list[bytes], int]:
        db = await open_chat_db(tmp_path_factory.mktemp("moved") / "chat.sqlite3")
        try:
            sink = MovedChunks(db)
            stored = 0
            for start, size in windows:
                first = min(start, stored) + 1  # never past the stored end: no gap
                batch = Batch.of(first, lines[first - 1 : first - 1 + size])
                await sink.move("ses_a", 1, batch)
                stored = max(stored, batch.last)
            return await sink.read("ses_a"), stored
        finally:
            await db.close()

    moved, stored = trio.run(scenario)
    assert moved == lines[:stored]


async def test_a_fenced_generation_writes_nothing(db: Database) -> None:
    sink = MovedChunks(db)
    await sink.move("ses_a", 1, chunks(1, 3))
    assert await sink.fence("ses_a", 2) == 1  # a new owner claimed
    with pytest.raises(FencedError) as fenced:
        await sink.move("ses_a", 1, chunks(4, 9))
    assert (fenced.value.generation, fenced.value.fence) == (1, 2)
    with pytest.raises(FencedError):
        await sink.move("ses_a", 1, Batch.of(4, []))
    assert await sink.last_cursor("ses_a") == 3
    await sink.move("ses_a", 3, chunks(4, 5))  # a newer one raises the fence as it writes
    assert await sink.generation("ses_a") == 3
    with pytest.raises(FencedError):
        await sink.move("ses_a", 2, chunks(6, 6))
    with pytest.raises(FencedError):
        await sink.fence("ses_a", 2)
    assert await sink.read("ses_a") == lines(1, 5)


@pytest.mark.parametrize("chat_database", ["sqlite"], indirect=True)  # its migration
async def test_chunks_moved_before_runs_are_kept_by_the_migration(tmp_path: Path) -> None:
    """A database whose mover stored a row per chunk (migration 3) keeps them as runs
    of one chunk, and moving on from there appends after them."""
    path = tmp_path / "chat.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn, MIGRATIONS[:4])
        conn.executemany(
            "INSERT INTO moved_chunks (session_id, cursor, chunk) VALUES ('ses_a', ?, ?)",
            [(cursor, chunk(cursor)) for cursor in (1, 2, 3)],
        )
    finally:
        conn.close()
    db = await open_chat_db(path)
    try:
        sink = MovedChunks(db)
        assert await sink.last_chunk("ses_a") == (3, chunk(3))
        await sink.move("ses_a", 1, chunks(2, 6))
        assert await sink.read("ses_a") == lines(1, 6)
    finally:
        await db.close()
