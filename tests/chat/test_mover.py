"""The log mover on real sessions: a real runner (in-process SessionService, and over
its WebSocket through Hypercorn), real SQLite, a real redis-server.

Every test checks what the settling owner folded, and the chunks it stored when it
keeps them (``keep_chunks``, the default here), against the session's own output, read
from the runner over NDJSON: byte for byte, none lost, none twice.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
import trio
import trio_websocket

from benchmarks.support.redis_server import open_redis_server
from benchmarks.support.workspace import WorkspaceServer
from sandstream.server.chat.mover import (
    SESSION_LOST,
    EmbeddedSource,
    Lease,
    LogMover,
    OpenSessionRef,
    Passed,
    RedisLease,
    RemoteSource,
    SessionSources,
    SourceFor,
    SourceRefusedError,
    open_lease,
)
from sandstream.server.chat.mover.lease import redis_keys
from sandstream.server.chat.store.database import Database
from sandstream.server.chat.store.leases import DatabaseLease
from sandstream.server.chat.store.moved_runs import Batch, MovedChunks
from tests.chat.databases import database_url
from tests.chat.mover_harness import CollectingFold, LeaseKind, RecordingSink, start_proxy
from tests.server.harness import RunnerServer, load
from tests.sessions.harness import (
    TOKEN,
    create,
    read_all,
    session_service,
    start_sessions,
    wait_state,
)

pytestmark = pytest.mark.usefixtures("chat_database")

TTL = 2.0
HEARTBEAT = 0.25
"""A stall of the event loop longer than TTL - HEARTBEAT loses a lease (the next sweep
claims it again, under a newer generation): the tests allow for that on a loaded
machine, and check the invariants that hold whatever the generations."""


@dataclass
class Settled:
    """What ``on_terminal`` was called with (the last fold per session), and an event
    per session."""

    calls: list[tuple[str, int]] = field(default_factory=list)
    folds: dict[str, CollectingFold] = field(default_factory=dict)
    events: dict[str, trio.Event] = field(default_factory=dict)
    made: list[CollectingFold] = field(default_factory=list)
    """Every fold a mover started, in order."""
    needs_chunks: bool = True
    """What the folds say they need."""

    def new_fold(self, ref: OpenSessionRef) -> CollectingFold:
        self.made.append(CollectingFold())
        self.made[-1].needs_chunks = self.needs_chunks
        return self.made[-1]

    async def __call__(self, ref: OpenSessionRef, generation: int, fold: CollectingFold) -> None:
        self.calls.append((ref.session_id, generation))
        self.folds[ref.session_id] = fold
        self.event(ref.session_id).set()

    def event(self, session_id: str) -> trio.Event:
        return self.events.setdefault(session_id, trio.Event())


def live(settled: Settled, *refs: OpenSessionRef) -> Callable[[], Awaitable[list[OpenSessionRef]]]:
    """``open_sessions()`` as the chat answers it: the sessions not settled yet."""

    async def sessions() -> list[OpenSessionRef]:
        return [ref for ref in refs if not settled.event(ref.session_id).is_set()]

    return sessions


@pytest.fixture
async def runner(nursery: trio.Nursery, tmp_path: Path) -> RunnerServer:
    return await start_sessions(nursery, tmp_path / "runner")


async def start_session(
    runner: RunnerServer, workspace: WorkspaceServer, lines: int, rate: float
) -> str:
    workspace.config = load(lines, rate=rate, payload_bytes=48)
    async with runner.client() as client:
        return await create(client, workspace.mint_dispatch("go"))


async def output(runner: RunnerServer, session_id: str) -> list[bytes]:
    """The session's chunks, as its runner serves them (to its end)."""
    return (await read_all(runner, session_id)).chunks


async def wait_stored(sink: MovedChunks, session_id: str, count: int) -> None:
    with trio.fail_after(60):
        while await sink.last_cursor(session_id) < count:
            await trio.sleep(0.01)


def mover(
    lease: Lease, sink: MovedChunks, sources: SourceFor, owner: str, ref: OpenSessionRef,
    settled: Settled, *, keep_chunks: bool = True, ttl: float = TTL,
    heartbeat: float = HEARTBEAT, sweep_interval: float = 0.05,
) -> LogMover[CollectingFold]:  # fmt: skip
    return LogMover(
        lease,
        sink,
        sources,
        owner,
        open_sessions=live(settled, ref),
        new_fold=settled.new_fold,
        on_terminal=settled,
        keep_chunks=keep_chunks,
        ttl=ttl,
        heartbeat=heartbeat,
        sweep_interval=sweep_interval,
    )


@asynccontextmanager
async def open_kind(kind: LeaseKind, db: Database) -> AsyncIterator[tuple[Lease, str | None]]:
    """A lease of ``kind`` (a redis-server of its own for ``redis``) and its Redis URL."""
    if kind == "sqlite":
        yield DatabaseLease(db), None
        return
    async with open_redis_server() as server, open_lease(server.url, db) as lease:
        yield lease, server.url


async def steal(kind: LeaseKind, lease: Lease, db: Database, session_id: str) -> None:
    """Make the session's lease vanish under its owner (a Redis failover that lost the
    key, a clock jump): the owner does not know yet."""
    if isinstance(lease, RedisLease):
        await lease.redis.delete([redis_keys(session_id)[0]])
    else:
        await db.write(lambda conn: conn.execute("UPDATE leases SET expires_at = 0"))


# -- moving ---------------------------------------------------------------------------


async def test_an_embedded_session_is_moved_byte_for_byte(
    nursery: trio.Nursery, runner: RunnerServer, workspace: WorkspaceServer, db: Database
) -> None:
    session_id = await start_session(runner, workspace, 1500, rate=1000)
    ref = OpenSessionRef(session_id)
    sink, settled = MovedChunks(db), Settled()
    sources = SessionSources(embedded=session_service(runner))
    the_mover = mover(DatabaseLease(db), sink, sources, "replica-1", ref, settled)
    await nursery.start(the_mover.run)
    with trio.fail_after(60):
        await settled.event(session_id).wait()
    expected = await output(runner, session_id)
    assert len(expected) > 1500
    assert await sink.read(session_id) == expected
    assert settled.folds[session_id].chunks == expected
    ((settled_id, generation),) = settled.calls  # 1, unless a stall lost the lease
    assert settled_id == session_id
    assert msgspec.json.decode(expected[-1])["type"] == "result"
    assert await sink.generation(session_id) == generation


async def test_the_embedded_source_batches_by_linger_and_ends_at_the_sessions_end(
    runner: RunnerServer, workspace: WorkspaceServer, db: Database
) -> None:
    """While the session runs, at most one batch per ``linger``; its end cuts the
    linger short (an hour here: the follow would hang past the deadline otherwise)."""
    session_id = await start_session(runner, workspace, 1500, rate=1000)
    sink = MovedChunks(db)
    batches: list[Batch] = []

    async def deliver(batch: Batch | Passed) -> None:
        assert isinstance(batch, Batch)
        batches.append(batch)
        await sink.move(session_id, 1, batch)

    source = EmbeddedSource(session_service(runner), linger=3600)
    with trio.fail_after(60):
        await source.follow(session_id, 0, deliver)
    expected = await output(runner, session_id)
    assert 1 <= len(batches) <= 2
    assert [b.first for b in batches] == [1, *(b.last + 1 for b in batches[:-1])]
    assert batches[-1].last == len(expected)
    assert await sink.read(session_id) == expected


async def test_a_remote_session_is_moved_whole_through_dropped_websockets(
    nursery: trio.Nursery, runner: RunnerServer, workspace: WorkspaceServer, db: Database
) -> None:
    proxy = await start_proxy(nursery, runner.url)
    session_id = await start_session(runner, workspace, 2000, rate=500)
    ref = OpenSessionRef(session_id, proxy.url)
    source = RemoteSource(proxy.url, TOKEN, reconnect_delay=0.01)
    sink, settled = MovedChunks(db), Settled()
    the_mover = mover(DatabaseLease(db), sink, lambda _: source, "replica-1", ref, settled)
    await nursery.start(the_mover.run)
    for stored in (100, 300, 500, 700):
        await wait_stored(sink, session_id, stored)
        assert not session_service(runner).get(session_id).ended
        # Mid-session, maybe mid-message; always a connection in use (a cut made while
        # the source is between connections would drop nothing).
        with trio.fail_after(30):
            assert await proxy.cut_live() >= 1
    with trio.fail_after(60):
        await settled.event(session_id).wait()
    assert source.reconnects >= 4  # each cut dropped the connection it was reading
    expected = await output(runner, session_id)
    assert await sink.read(session_id) == expected
    assert settled.folds[session_id].chunks == expected
    assert [call[0] for call in settled.calls] == [session_id]


async def test_a_runner_that_sends_no_whole_line_batches_is_refused_for_good(
    nursery: trio.Nursery,
) -> None:
    asked: list[str] = []
    sent: list[str | bytes] = []

    async def odd_runner(request: trio_websocket.WebSocketRequest) -> None:
        asked.append(request.path)
        ws = await request.accept()
        await ws.send_message(sent[-1])
        with contextlib.suppress(trio_websocket.ConnectionClosed):
            await ws.get_message()  # until the reader leaves

    listeners = await nursery.start(
        trio_websocket.serve_websocket, odd_runner, "127.0.0.1", 0, None
    )
    url = f"http://127.0.0.1:{listeners.port}"
    line = '{"type":"log","level":"info","message":"hi","ts":1}'
    cases: list[tuple[str | bytes, str]] = [(line, "as text"), (line.encode(), "not whole lines")]
    for message, why in cases:
        sent.append(message)
        with trio.fail_after(30), pytest.raises(SourceRefusedError, match=why):
            await RemoteSource(url, TOKEN).follow("ses_a", 0, lambda batch: trio.sleep(0))
    assert asked == ["/sessions/ses_a/ws?cursor=0&batch=262144"] * 2


async def test_a_silent_connection_is_found_dead_by_ping_and_replaced(
    nursery: trio.Nursery, runner: RunnerServer, workspace: WorkspaceServer, db: Database
) -> None:
    proxy = await start_proxy(nursery, runner.url)
    session_id = await start_session(runner, workspace, 1500, rate=500)
    ref = OpenSessionRef(session_id, proxy.url)
    source = RemoteSource(proxy.url, TOKEN, ping_interval=0.1, ping_timeout=0.3)
    sink, settled = MovedChunks(db), Settled()
    the_mover = mover(DatabaseLease(db), sink, lambda _: source, "replica-1", ref, settled)
    await nursery.start(the_mover.run)
    await wait_stored(sink, session_id, 100)
    proxy.freeze()  # a partition: no close, no data, no pong
    with trio.fail_after(60):
        await settled.event(session_id).wait()
    assert proxy.cuts == 0 and source.reconnects >= 1
    assert await sink.read(session_id) == await output(runner, session_id)


async def test_a_session_stored_whole_but_not_settled_is_settled_by_the_next_owner(
    runner: RunnerServer, workspace: WorkspaceServer, db: Database
) -> None:
    session_id = await start_session(runner, workspace, 50, rate=0)
    expected = await output(runner, session_id)
    sink, settled = RecordingSink(db), Settled()
    await sink.move(session_id, 1, Batch.of(1, expected))  # then its owner died
    sources = SessionSources(runner_token=TOKEN)
    ref = OpenSessionRef(session_id, runner.url)
    assert (
        await mover(DatabaseLease(db), sink, sources, "replica-2", ref, settled).move(ref)
        == "moved"
    )
    assert settled.calls == [(session_id, 1)]  # the first claim in the leases: generation 1
    assert [event[0] for event in sink.events] == ["move", "fence"]  # nothing moved again
    assert await sink.read(session_id) == expected
    assert settled.folds[session_id].chunks == expected  # folded from the stored copy


async def test_a_session_its_runner_does_not_know_ends_as_session_lost(
    runner: RunnerServer, db: Database
) -> None:
    sink, settled = MovedChunks(db), Settled()
    for ref in (OpenSessionRef("ses_unknown"), OpenSessionRef("ses_gone", runner.url)):
        sources = SessionSources(embedded=session_service(runner), runner_token=TOKEN)
        outcome = await mover(DatabaseLease(db), sink, sources, "r", ref, settled).move(ref)
        assert outcome == "moved"
        (line,) = await sink.read(ref.session_id)
        assert settled.folds[ref.session_id].chunks == [line]
        error = msgspec.json.decode(line)
        assert (error["type"], error["code"]) == ("error", SESSION_LOST)
        assert settled.calls[-1] == (ref.session_id, 1)


async def test_a_refused_read_raises_and_releases_the_lease(
    runner: RunnerServer, workspace: WorkspaceServer, db: Database
) -> None:
    session_id = await start_session(runner, workspace, 10, rate=0)
    ref = OpenSessionRef(session_id, runner.url)
    lease, sink, settled = DatabaseLease(db), MovedChunks(db), Settled()
    sources = SessionSources(runner_token="not-the-token")
    with pytest.raises(SourceRefusedError, match="401"):
        await mover(lease, sink, sources, "replica-1", ref, settled).move(ref)
    assert await lease.acquire(session_id, "replica-2", 30) == 2  # released, not left to expire
    assert await sink.read(session_id) == []
    assert settled.calls == []
    with pytest.raises(SourceRefusedError, match="no embedded runner"):
        SessionSources()(OpenSessionRef(session_id))


# -- folding without a copy -------------------------------------------------------------


async def stored_rows(db: Database) -> int:
    return int(
        (await db.read(lambda c: c.execute("SELECT count(*) FROM moved_runs").fetchone()))[0]
    )


@pytest.mark.parametrize("where", ["embedded", "remote"])
async def test_without_keep_chunks_a_session_is_folded_whole_and_nothing_is_copied(
    where: str,
    nursery: trio.Nursery,
    runner: RunnerServer,
    workspace: WorkspaceServer,
    db: Database,
) -> None:
    session_id = await start_session(runner, workspace, 1500, rate=1000)
    ref = OpenSessionRef(session_id, None if where == "embedded" else runner.url)
    sink, settled = RecordingSink(db), Settled()
    sources = SessionSources(embedded=session_service(runner), runner_token=TOKEN)
    the_mover = mover(DatabaseLease(db), sink, sources, "r", ref, settled, keep_chunks=False)
    await nursery.start(the_mover.run)
    with trio.fail_after(60):
        await settled.event(session_id).wait()
    assert settled.folds[session_id].chunks == await output(runner, session_id)
    assert await stored_rows(db) == 0
    assert {event[0] for event in sink.events} == {"fence"}


async def test_a_fold_that_needs_no_chunks_is_fed_none_and_the_end_is_still_found(
    nursery: trio.Nursery, runner: RunnerServer, workspace: WorkspaceServer, db: Database
) -> None:
    """As the chat's fold shared with the embedded runner's core: the source reads
    only where the chunks end, the mover settles at the terminal."""
    session_id = await start_session(runner, workspace, 1500, rate=1000)
    ref = OpenSessionRef(session_id)
    sink, settled = RecordingSink(db), Settled(needs_chunks=False)
    sources = SessionSources(embedded=session_service(runner))
    the_mover = mover(DatabaseLease(db), sink, sources, "r", ref, settled, keep_chunks=False)
    await nursery.start(the_mover.run)
    with trio.fail_after(60):
        await settled.event(session_id).wait()
    assert settled.folds[session_id].fed == []
    assert settled.calls == [(session_id, 1)]
    assert session_service(runner).get(session_id).ended


async def test_without_keep_chunks_a_new_owner_folds_from_the_first_chunk(
    nursery: trio.Nursery, runner: RunnerServer, workspace: WorkspaceServer, db: Database
) -> None:
    session_id = await start_session(runner, workspace, 2500, rate=500)
    ref = OpenSessionRef(session_id)
    sources = SessionSources(embedded=session_service(runner))
    sink, settled = RecordingSink(db), Settled()
    first = mover(DatabaseLease(db), sink, sources, "replica-1", ref, settled, keep_chunks=False)
    second = mover(DatabaseLease(db), sink, sources, "replica-2", ref, settled, keep_chunks=False)
    async with trio.open_nursery() as owner:
        await owner.start(first.run)
        with trio.fail_after(60):
            while not settled.made or len(settled.made[0].chunks) < 100:
                await trio.sleep(0.01)
        await nursery.start(second.run)  # its sweeps find the lease held
        assert not session_service(runner).get(session_id).ended
        owner.cancel_scope.cancel()  # the replica stops: its lease is released
    with trio.fail_after(60):
        await settled.event(session_id).wait()
    expected = await output(runner, session_id)
    assert settled.folds[session_id].chunks == expected
    assert settled.folds[session_id] is not settled.made[0]
    assert len(settled.made[0].chunks) < len(expected)  # the first stopped short
    ((_, generation),) = settled.calls
    assert generation >= 2 and second.takeovers >= 1
    assert await stored_rows(db) == 0


# -- takeover ---------------------------------------------------------------------------


async def check_takeover(
    runner: RunnerServer, session_id: str, sink: RecordingSink, settled: Settled
) -> None:
    """Another owner finished: the stored chunks are the session's, and so is what it
    folded, settled once by the newest generation, and no write of a generation came
    after a newer one claimed."""
    expected = await output(runner, session_id)
    assert await sink.read(session_id) == expected
    assert settled.folds[session_id].chunks == expected
    ((settled_id, generation),) = settled.calls
    assert settled_id == session_id and generation >= 2
    assert generation == max(e[1] for e in sink.events)
    check_fenced(sink)
    claimed = sink.events.index(("fence", generation, 0, 0))
    assert any(e[0] == "move" and e[1] == generation for e in sink.events[claimed:])


def check_fenced(sink: RecordingSink) -> None:
    """In commit order, no write under a generation below one that claimed before it."""
    fence = 0
    for _, generation, _, _ in sink.events:
        assert generation >= fence, sink.events
        fence = max(fence, generation)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_a_cancelled_owner_hands_over_and_the_other_finishes(
    kind: LeaseKind,
    nursery: trio.Nursery,
    runner: RunnerServer,
    workspace: WorkspaceServer,
    db: Database,
) -> None:
    session_id = await start_session(runner, workspace, 2500, rate=500)
    ref = OpenSessionRef(session_id)
    sources = SessionSources(embedded=session_service(runner))
    sink, settled = RecordingSink(db), Settled()
    async with open_kind(kind, db) as (lease, _):
        first = mover(lease, sink, sources, "replica-1", ref, settled)
        second = mover(lease, sink, sources, "replica-2", ref, settled)
        async with trio.open_nursery() as owner:
            await owner.start(first.run)
            await wait_stored(sink, session_id, 100)
            await nursery.start(second.run)  # its sweeps find the lease held
            await wait_stored(sink, session_id, 200)
            assert not session_service(runner).get(session_id).ended
            owner.cancel_scope.cancel()  # the replica stops: its lease is released
        with trio.fail_after(60):
            await settled.event(session_id).wait()
    await check_takeover(runner, session_id, sink, settled)


def owner_process(
    runner: RunnerServer, session_id: str, db_path: Path, redis_url: str | None
) -> subprocess.Popen[bytes]:
    """``benchmarks.support.mover_process`` moving the session as ``replica-1``, in a process."""
    argv = [
        sys.executable, "-m", "benchmarks.support.mover_process",
        "--db", database_url(db_path.parent) or str(db_path), "--runner-url", runner.url,
        "--token", TOKEN, "--session", session_id, "--owner", "replica-1",
        "--ttl", str(TTL), "--heartbeat", str(HEARTBEAT),
        *(["--redis-url", redis_url] if redis_url else []),
    ]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE)


async def _taken_over_from_frozen(child: subprocess.Popen[bytes], done: trio.Event) -> None:
    """Wait for ``done`` while ``child`` is frozen. A child frozen inside a database
    transaction holds its locks, and nobody can write until it runs again: then it
    is let run for a moment now and then (its transaction ends; it is past its ttl,
    so it is fenced off from then on) and frozen again."""
    while True:
        with trio.move_on_after(3 * TTL):
            await done.wait()
            return
        child.send_signal(signal.SIGCONT)
        await trio.sleep(0.05)
        child.send_signal(signal.SIGSTOP)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@pytest.mark.parametrize("death", ["SIGKILL", "SIGSTOP"])
async def test_an_owner_process_that_dies_or_freezes_is_taken_over_after_the_ttl(
    kind: LeaseKind,
    death: str,
    nursery: trio.Nursery,
    runner: RunnerServer,
    workspace: WorkspaceServer,
    db: Database,
    tmp_path: Path,
) -> None:
    # 10 s of lines: the owner process starts, moves and dies mid-session on a loaded machine
    session_id = await start_session(runner, workspace, 5000, rate=500)
    ref = OpenSessionRef(session_id, runner.url)
    sink, settled = RecordingSink(db), Settled()
    async with open_kind(kind, db) as (lease, url):
        child = owner_process(runner, session_id, tmp_path / "chat.sqlite3", url)
        try:
            await wait_stored(sink, session_id, 100)
            sources = SessionSources(runner_token=TOKEN)
            second = mover(lease, sink, sources, "replica-2", ref, settled)
            await nursery.start(second.run)  # its sweeps find the lease held
            await wait_stored(sink, session_id, 200)
            assert not session_service(runner).get(session_id).ended
            # no release: the lease must expire
            child.send_signal(signal.SIGKILL if death == "SIGKILL" else signal.SIGSTOP)
            with trio.fail_after(60):
                if death == "SIGKILL":
                    await settled.event(session_id).wait()
                else:
                    await _taken_over_from_frozen(child, settled.event(session_id))
            if death == "SIGSTOP":  # a pause longer than the ttl (a GC, a VM migration)
                moved = await sink.read(session_id)
                child.send_signal(signal.SIGCONT)
                out, _ = await trio.to_thread.run_sync(child.communicate)
                assert out.decode().split() == ["outcome", "lease_lost"]  # it did not settle
                assert await sink.read(session_id) == moved
        finally:
            child.kill()
            child.wait()
            if child.stdout is not None:
                child.stdout.close()
    await check_takeover(runner, session_id, sink, settled)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_a_fenced_owner_stops_at_once_and_writes_nothing_more(
    kind: LeaseKind, runner: RunnerServer, workspace: WorkspaceServer, db: Database
) -> None:
    session_id = await start_session(runner, workspace, 2500, rate=500)
    ref = OpenSessionRef(session_id)
    sources = SessionSources(embedded=session_service(runner))
    sink, settled = RecordingSink(db), Settled()
    async with open_kind(kind, db) as (lease, _):
        # A long ttl: the first owner believes it holds the lease throughout.
        first = mover(lease, sink, sources, "replica-1", ref, settled, ttl=60, heartbeat=20)
        second = mover(lease, sink, sources, "replica-2", ref, settled)
        outcomes: list[str] = []

        async def first_moves() -> None:
            outcomes.append(await first.move(ref))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first_moves)
            await wait_stored(sink, session_id, 100)
            await steal(kind, lease, db, session_id)
            assert await second.move(ref) == "moved"
        assert outcomes == ["lease_lost"]
    await check_takeover(runner, session_id, sink, settled)
    moves_of_first = [e for e in sink.events if e[0] == "move" and e[1] == 1]
    assert moves_of_first and moves_of_first[-1][3] < len(await sink.read(session_id))


async def test_bad_settings_are_refused(db: Database) -> None:
    sink, settled = MovedChunks(db), Settled()
    sources = SessionSources()
    ref = OpenSessionRef("ses_a")
    with pytest.raises(ValueError, match="shorter than the ttl"):
        mover(DatabaseLease(db), sink, sources, "r", ref, settled, ttl=1, heartbeat=1)
    with pytest.raises(ValueError, match="sweep_interval"):
        mover(DatabaseLease(db), sink, sources, "r", ref, settled, sweep_interval=0)
    with pytest.raises(RuntimeError, match="not running"):
        mover(DatabaseLease(db), sink, sources, "r", ref, settled).claim_now(ref)
    with pytest.raises(ValueError, match="http"):
        RemoteSource("ftp://runner", TOKEN)


async def test_chunks_dropped_by_retention_end_the_moved_log_as_session_lost(
    nursery: trio.Nursery, workspace: WorkspaceServer, db: Database, tmp_path: Path
) -> None:
    runner = await start_sessions(nursery, tmp_path / "runner", retain_chunks=10)
    # Paced, so the lines come in many runs: retention keeps a run that straddles its
    # bound whole, and one run of all 100 lines would keep the first chunk.
    session_id = await start_session(runner, workspace, 100, rate=2000)
    async with runner.client() as client:
        await wait_state(client, session_id, "completed")
    sources = SessionSources(embedded=session_service(runner), runner_token=TOKEN)
    for ref in (OpenSessionRef(session_id), OpenSessionRef(session_id, runner.url)):
        sink, settled = MovedChunks(db), Settled()
        await db.write(lambda conn: conn.execute("DELETE FROM moved_runs"))
        outcome = await mover(DatabaseLease(db), sink, sources, "r", ref, settled).move(ref)
        assert outcome == "moved"
        (line,) = await sink.read(session_id)  # never a silent skip to the retained ones
        assert settled.folds[session_id].chunks == [line]
        error = msgspec.json.decode(line)
        assert (error["type"], error["code"]) == ("error", SESSION_LOST)
        assert "retain" in error["message"] or "410" in error["message"], error
        assert [call[0] for call in settled.calls] == [session_id]
