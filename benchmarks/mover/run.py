"""Log mover benchmarks: chunks moved per second, and takeover time.

``.venv/bin/python -m benchmarks.mover.run [throughput] [takeover] [--json] [options]``

A runner with durable sessions is served by Hypercorn in this process (so that the
embedded mover reads its :class:`SessionService` directly); the chat database is a
fresh SQLite file per measure. Each mover folds the chunks into a chat turn's message
(:class:`~sandstream.server.chat.TurnFold`, the chat's default limits), as the chat's
mover does.

**throughput** — one finished session of ``--lines`` load-mode lines (``--payload``
bytes each), then, interleaved ``--repeat`` times (medians): the runner's own read of
it to the end over NDJSON and over its WebSocket, a message per chunk and in the
mover's batches of 256 KiB (the baselines: one reader, no storage), and one
:class:`LogMover` following it to its end, from the in-process session (embedded) and
over the WebSocket (batches): folding only (the default), and folding and keeping a
copy of every chunk in a fresh chat database (``keep_chunks``). Chunks/s; each mover
beside the read it depends on. With ``--postgres`` both movers also keep the copy in a
fresh database of a real PostgreSQL server (:mod:`benchmarks.support.postgres_server`),
the chat store's ``--database-url`` backend.

**takeover** — for the SQLite lease and a real redis-server's: a mover in a process
of its own (``.venv/bin/python -m benchmarks.support.mover_process``) moves a live session over
the WebSocket; a second mover sweeps every ``--sweep`` s. The first is SIGKILLed
(no release: its lease must expire); the time from the kill to the second mover's
first moved batch (both keep the chunks), ``--repeat`` times, beside the lease's
``--ttl`` (renewed every ``--heartbeat`` s), which bounds it: between ttl - heartbeat
and ttl + sweep. The kill
falls at a random phase of the first's heartbeat (seeded), so the median is expected
near ttl - heartbeat / 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, TypedDict, Unpack

import httpx
import trio

from benchmarks.runner.support import (
    CONTAINER_ARGV,
    TOKEN,
    InProcessRunner,
    create_session,
    environment,
    launcher,
    start_in_process,
    wait_state,
)
from benchmarks.support.mover_process import Folds
from benchmarks.support.postgres_server import PostgresServer, open_postgres_server
from benchmarks.support.redis_server import open_redis_server
from benchmarks.support.servers import http1_client
from benchmarks.support.session_client import Transport, read_session
from benchmarks.support.workspace import WorkspaceServer, start_workspace
from sandstream.core.schemas import ConfigResponse, LoadSpec, ScriptedAgent
from sandstream.server import RunnerSettings
from sandstream.server.chat import TurnFold
from sandstream.server.chat.mover import (
    Lease,
    LogMover,
    OpenSessionRef,
    RemoteSource,
    SessionSources,
    SourceFor,
    open_lease,
)
from sandstream.server.chat.store.database import Database
from sandstream.server.chat.store.leases import DatabaseLease
from sandstream.server.chat.store.migrations import migrate, migrate_postgres
from sandstream.server.chat.store.moved_runs import Batch, MovedChunks
from sandstream.server.databases.postgres import PostgresDatabase
from sandstream.server.databases.sqlite import SQLiteDatabase
from sandstream.server.sessions import SessionSettings, get_sessions

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _load(lines: int, rate: float = 0.0, payload: int = 64) -> ConfigResponse:
    spec = LoadSpec(lines=lines, rate=rate, payload_bytes=payload)
    return ConfigResponse(agent=ScriptedAgent(load=spec, message="loaded"))


async def _no_sessions() -> list[OpenSessionRef]:
    return []


class LeaseTimes(TypedDict, total=False):
    """The mover's lease timings a run sets (the mover's defaults otherwise)."""

    ttl: float
    heartbeat: float
    sweep_interval: float


def _mover(
    lease: Lease,
    sink: MovedChunks,
    sources: SourceFor,
    owner: str,
    folds: Folds,
    *,
    keep_chunks: bool,
    open_sessions: Callable[[], Awaitable[list[OpenSessionRef]]] = _no_sessions,
    **times: Unpack[LeaseTimes],
) -> LogMover[TurnFold]:
    return LogMover(
        lease,
        sink,
        sources,
        owner,
        open_sessions=open_sessions,
        new_fold=folds.new,
        on_terminal=folds.settle,
        keep_chunks=keep_chunks,
        **times,
    )


async def _start_runner(nursery: trio.Nursery, data_dir: Path) -> InProcessRunner:
    """A runner with durable sessions in ``data_dir``, in this process (so that the
    embedded mover reads its :class:`SessionService` directly)."""
    return await start_in_process(
        nursery,
        RunnerSettings(token=TOKEN),
        launcher("local", CONTAINER_ARGV),
        sessions=SessionSettings(data_dir=data_dir),
    )


def _client(runner: InProcessRunner) -> httpx.AsyncClient:
    return http1_client(runner.url, headers=AUTH, timeout=60)


async def _session(
    runner: InProcessRunner, workspace: WorkspaceServer, config: ConfigResponse
) -> str:
    workspace.config = config
    async with _client(runner) as client:
        return await create_session(client, workspace.mint_dispatch("go"))


async def _chat_db(path: Path) -> SQLiteDatabase:
    """A fresh chat database at ``path``, migrated (leases, fences, moved runs)."""
    return await SQLiteDatabase.open(path, migrate=migrate)


# -- throughput --------------------------------------------------------------------------


async def _timed(job: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    started = time.perf_counter()
    count = await job()
    return time.perf_counter() - started, count


async def throughput(
    lines: int, payload: int, repeat: int, tmp: Path, postgres: PostgresServer | None = None
) -> dict[str, Any]:
    rates: dict[str, list[float]] = {
        "runner read, NDJSON": [],
        "runner read, WebSocket": [],
        "runner read, WebSocket batches": [],
        "mover, embedded": [],
        "mover, embedded, keeping chunks": [],
        "mover, WebSocket": [],
        "mover, WebSocket, keeping chunks": [],
    }
    if postgres is not None:
        rates["mover, embedded, keeping chunks, PostgreSQL"] = []
        rates["mover, WebSocket, keeping chunks, PostgreSQL"] = []
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(nursery, config=_load(lines, payload=payload))
        runner = await _start_runner(nursery, tmp / "runner")
        session_id = await _session(runner, workspace, _load(lines, payload=payload))
        async with _client(runner) as client:
            status = await wait_state(client, session_id, "completed")
        total: int = status["last_chunk_id"]
        embedded = SessionSources(embedded=get_sessions(runner.app))
        remote = SessionSources(runner_token=TOKEN)

        async def read(transport: Transport) -> int:
            result = await read_session(
                runner.url,
                session_id,
                TOKEN,
                transport,
                0,
                on_chunk=lambda c, line: None,
                batch_bytes=256 * 1024,  # the mover's
            )
            return result.cursor

        async def move(
            sources: SessionSources,
            url: str | None,
            name: str,
            *,
            keep_chunks: bool = False,
            on_postgres: bool = False,
        ) -> int:
            """Chunks the mover folded (and stored, with ``keep_chunks``)."""
            db: Database
            if on_postgres and postgres is not None:
                database = await trio.to_thread.run_sync(postgres.create_database)
                db = await PostgresDatabase.open(database, migrate=migrate_postgres)
            else:
                db = await _chat_db(tmp / f"chat-{name}.sqlite3")
            try:
                sink, folds = MovedChunks(db), Folds()
                ref = OpenSessionRef(session_id, url)
                the_mover = _mover(
                    DatabaseLease(db), sink, sources, "bench", folds, keep_chunks=keep_chunks
                )
                await the_mover.move(ref)
                folded = 0 if folds.settled is None else folds.settled.lines
                stored = await sink.last_cursor(session_id)
                return min(folded, stored) if keep_chunks else folded
            finally:
                await db.close()

        for round_ in range(repeat):
            jobs: dict[str, Callable[[], Awaitable[int]]] = {
                "runner read, NDJSON": lambda: read("ndjson"),
                "runner read, WebSocket": lambda: read("ws"),
                "runner read, WebSocket batches": lambda: read("ws-batch"),
                "mover, embedded": partial(move, embedded, None, f"embedded-{round_}"),
                "mover, embedded, keeping chunks": partial(
                    move, embedded, None, f"embedded-kept-{round_}", keep_chunks=True
                ),
                "mover, WebSocket": partial(move, remote, runner.url, f"ws-{round_}"),
                "mover, WebSocket, keeping chunks": partial(
                    move, remote, runner.url, f"ws-kept-{round_}", keep_chunks=True
                ),
            }
            if postgres is not None:
                jobs["mover, embedded, keeping chunks, PostgreSQL"] = lambda: move(
                    embedded, None, "", keep_chunks=True, on_postgres=True
                )
                jobs["mover, WebSocket, keeping chunks, PostgreSQL"] = lambda: move(
                    remote, runner.url, "", keep_chunks=True, on_postgres=True
                )
            for name, job in jobs.items():
                seconds, count = await _timed(job)
                if count != total:
                    raise RuntimeError(f"{name}: {count} chunks of {total}")
                rates[name].append(total / seconds)
        await runner.shutdown()
        nursery.cancel_scope.cancel()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return {
        "chunks": total,
        "payload_bytes": payload,
        "chunks_per_s": {name: round(value) for name, value in medians.items()},
        "rounds": {name: [round(value) for value in values] for name, values in rates.items()},
        "mover_embedded_vs_ndjson_read": round(
            medians["mover, embedded"] / medians["runner read, NDJSON"], 2
        ),
        "mover_ws_vs_ws_read": round(
            medians["mover, WebSocket"] / medians["runner read, WebSocket batches"], 2
        ),
    }


# -- takeover ------------------------------------------------------------------------------


class _FirstMove(MovedChunks):
    """The sink, noting when the first batch of a newer generation than ``before`` was
    stored (trio time)."""

    def __init__(self, db: SQLiteDatabase) -> None:
        super().__init__(db)
        self.before = 0
        self.first: float | None = None
        self.moved = trio.Event()

    async def move(self, session_id: str, generation: int, batch: Batch) -> None:
        await super().move(session_id, generation, batch)
        if batch.count and generation > self.before and self.first is None:
            self.first = trio.current_time()
            self.moved.set()


async def _one_takeover(
    runner: InProcessRunner,
    workspace: WorkspaceServer,
    db_path: Path,
    redis_url: str | None,
    ttl: float,
    heartbeat: float,
    sweep: float,
    phase: random.Random,
) -> float:
    session_id = await _session(runner, workspace, _load(100_000, rate=500))
    db = await _chat_db(db_path)
    argv = [
        sys.executable, "-m", "benchmarks.support.mover_process", "--db", str(db_path),
        "--runner-url", runner.url, "--token", TOKEN, "--session", session_id,
        "--owner", "first", "--ttl", str(ttl), "--heartbeat", str(heartbeat),
        *(["--redis-url", redis_url] if redis_url else []),
    ]  # fmt: skip
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        async with (
            open_lease(redis_url, db) as lease,
            trio.open_nursery() as nursery,
        ):
            sink = _FirstMove(db)
            with trio.fail_after(60):
                while await sink.last_cursor(session_id) < 50:
                    await trio.sleep(0.01)
            sink.before = await sink.generation(session_id)  # the first's
            ref = OpenSessionRef(session_id, runner.url)
            source = RemoteSource(runner.url, TOKEN)
            second = _mover(
                lease,
                sink,
                lambda _: source,
                "second",
                Folds(),
                keep_chunks=True,
                open_sessions=lambda: _just(ref),
                ttl=ttl,
                heartbeat=heartbeat,
                sweep_interval=sweep,
            )
            await nursery.start(second.run)
            # at a random phase of the first's heartbeat (it renewed at least once)
            await trio.sleep(heartbeat * (1 + phase.random()))
            child.send_signal(signal.SIGKILL)
            killed = trio.current_time()
            await trio.to_thread.run_sync(child.wait)
            with trio.fail_after(ttl * 10 + 30):
                await sink.moved.wait()
            assert sink.first is not None
            nursery.cancel_scope.cancel()
    finally:
        child.kill()
        child.wait()
        await db.close()
        async with _client(runner) as client:
            await client.post(f"/sessions/{session_id}/interrupt")
    return sink.first - killed


async def _just(ref: OpenSessionRef) -> list[OpenSessionRef]:
    return [ref]


async def takeover(
    repeat: int, ttl: float, heartbeat: float, sweep: float, tmp: Path
) -> dict[str, Any]:
    results: dict[str, Any] = {"ttl_s": ttl, "heartbeat_s": heartbeat, "sweep_s": sweep}
    phase = random.Random(11)
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(nursery, config=_load(1))
        runner = await _start_runner(nursery, tmp / "runner-takeover")
        for kind in ("sqlite", "redis"):
            times = []
            for round_ in range(repeat):
                db_path = tmp / f"takeover-{kind}-{round_}.sqlite3"
                if kind == "redis":
                    async with open_redis_server() as server:
                        seconds = await _one_takeover(
                            runner, workspace, db_path, server.url, ttl, heartbeat, sweep, phase
                        )
                else:
                    seconds = await _one_takeover(
                        runner, workspace, db_path, None, ttl, heartbeat, sweep, phase
                    )
                times.append(seconds)
            results[kind] = {
                "median_s": round(statistics.median(times), 3),
                "min_s": round(min(times), 3),
                "max_s": round(max(times), 3),
                "median_vs_ttl": round(statistics.median(times) / ttl, 2),
            }
        await runner.shutdown()
        nursery.cancel_scope.cancel()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=".venv/bin/python -m benchmarks.mover.run")
    parser.add_argument("parts", nargs="*", default=["throughput", "takeover"], metavar="PART")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--lines", type=int, default=50_000, help="throughput lines (50k)")
    parser.add_argument("--payload", type=int, default=64, help="throughput payload bytes (64)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of each measure (3)")
    parser.add_argument("--ttl", type=float, default=3.0, help="takeover lease ttl s (3)")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="takeover heartbeat s (1)")
    parser.add_argument("--sweep", type=float, default=0.1, help="takeover sweep interval s")
    parser.add_argument(
        "--postgres", action="store_true", help="throughput into PostgreSQL too (a real server)"
    )
    args = parser.parse_args(argv)

    async def run() -> dict[str, Any]:
        results: dict[str, Any] = {"environment": environment()}
        with tempfile.TemporaryDirectory(prefix="sandstream-bench-") as name:
            tmp = Path(name)
            if "throughput" in args.parts:
                results["throughput"] = await throughput(
                    args.lines, args.payload, args.repeat, tmp, postgres
                )
            if "takeover" in args.parts:
                results["takeover"] = await takeover(
                    args.repeat, args.ttl, args.heartbeat, args.sweep, tmp
                )
        results["environment"]["load_average_1m_after"] = round(os.getloadavg()[0], 2)
        return results

    with open_postgres_server() if args.postgres else contextlib.nullcontext() as postgres:
        results = trio.run(run)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, value in results.items():
            print(f"{name}: {json.dumps(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
