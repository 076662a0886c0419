"""Durable-session benchmarks: fan-out latency, catch-up, append rate, memory.

``.venv/bin/python -m benchmarks.sessions.run [fanout] [catchup] [append] [memory]
[--json] [options]``

Every part runs ``sandstream runner --data-dir <tmp>`` as its own process (the
production shape) and its readers, over loopback, as raw HTTP/1.1 sockets (parsing
only what each measure needs, so that the readers cost little): in this process,
except fan-out's (a process of their own).

**fanout** — one session whose container emits ``--rate`` lines/s (50); N SSE readers
(``--ladder``, default 1,10,100,1000) follow it live, from a process of their own
(:mod:`.fanout_readers`: one epoll loop, so that the readers are not what is
measured). Per line and reader, latency = the reader's receive time - the line's
``ts`` (stamped by the container as it writes the line). Measured for ``--duration``
s after every reader received its first frame and a warm-up. Goal: 1000 readers at
p99 < 50 ms.

**catchup** — a finished session of ``--chunks`` (2,000) chunks of ~1 KiB; ``--clients``
(1,000) readers replay it from cursor 0 at once over NDJSON (and again over SSE):
MB/s served in total, first request to last byte.

**append** — lines/s of the same load-mode container (``--lines`` unpaced lines)
into the session buffer (first to last chunk, as a live reader of the session's
Durable Stream reads them stored) and
through ``POST /stream`` (first to last byte at the client), interleaved
``--repeat`` times; medians. Goal: sessions >= 70% of the attached rate.

**memory** — the runner's RSS with N idle readers caught up on a live session
(a container sleeping in a tool), and with M idle sessions (each a sleeping
container): KiB per idle reader and per idle session (the containers' own RSS apart).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx
import psutil
import trio

from benchmarks.runner.support import (
    TOKEN,
    create_session,
    environment,
    start_runner_process,
    wait_state,
)
from benchmarks.support.workspace import WorkspaceServer, start_workspace
from sandstream.core.schemas import ConfigResponse, LoadSpec, ScriptedAgent, ScriptedStep

AUTH: Final = {"Authorization": f"Bearer {TOKEN}"}
GOAL_P99_MS: Final = 50.0
GOAL_APPEND_RATIO: Final = 0.7


def _load(lines: int, rate: float = 0.0, payload: int = 64) -> ConfigResponse:
    spec = LoadSpec(lines=lines, rate=rate, payload_bytes=payload)
    return ConfigResponse(agent=ScriptedAgent(load=spec, message="loaded"))


def _sleeping() -> ConfigResponse:
    step = ScriptedStep(tool="run_shell", args={"command": "sleep 600", "timeout_sec": 300})
    return ConfigResponse(agent=ScriptedAgent(steps=[step]))


async def _create(client: httpx.AsyncClient, workspace: WorkspaceServer) -> str:
    return await create_session(client, workspace.mint_dispatch())


async def _open_reader(url: str, session_id: str, accept: str) -> trio.SocketStream:
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(
        (
            f"GET /sessions/{session_id}/stream?cursor=0 HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nAccept: {accept}\r\n\r\n"
        ).encode()
    )
    return stream


# -- fan-out ---------------------------------------------------------------------------


async def _fanout_level(
    readers: int, rate: float, duration: float, warmup: float, data_dir: Path
) -> dict[str, Any]:
    lines = int(rate * (duration + warmup + 120))
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(nursery, config=_load(lines, rate, 64))
        proc = await start_runner_process(nursery, "--data-dir", str(data_dir))
        runner_ps = psutil.Process(proc.process.pid)
        async with httpx.AsyncClient(base_url=proc.url, headers=AUTH, timeout=120) as client:
            session_id = await _create(client, workspace)
            command = [
                sys.executable,
                "-m",
                "benchmarks.sessions.fanout_readers",
                proc.url,
                session_id,
                str(readers),
                f"--warmup={warmup}",
                f"--duration={duration}",
            ]
            run_readers = partial(trio.run_process, command, stdout=subprocess.PIPE, check=False)
            client_proc: trio.Process = await nursery.start(run_readers)
            assert client_proc.stdout is not None
            output = b""
            load = cpu_before = 0.0
            with trio.fail_after(300 + warmup + duration):
                async with client_proc.stdout as stdout:
                    while chunk := await stdout.receive_some():
                        output += chunk
                        if not cpu_before and b"measuring\n" in output:  # the window opens
                            load = psutil.getloadavg()[0]
                            cpu_before = sum(runner_ps.cpu_times()[:2])
                await client_proc.wait()
            if client_proc.returncode != 0:
                raise RuntimeError(f"the readers failed ({client_proc.returncode})")
            runner_cpu = (sum(runner_ps.cpu_times()[:2]) - cpu_before) / duration * 100
            measured = json.loads(output.splitlines()[-1])
            await client.post(f"/sessions/{session_id}/interrupt")
        await proc.stop()
        nursery.cancel_scope.cancel()
    return {
        "readers": readers,
        **measured,
        "expected": int(readers * rate * duration),
        "runner_cpu_percent": round(runner_cpu),
        "load_average_1m": round(load, 2),
    }


async def fanout(
    ladder: list[int], rate: float, duration: float, warmup: float, tmp: Path
) -> dict[str, Any]:
    levels = []
    for index, readers in enumerate(ladder):
        level = await _fanout_level(readers, rate, duration, warmup, tmp / f"fanout{index}")
        levels.append(level)
        print(
            f"fanout {readers:>5} readers: p50 {level['p50_ms']} ms  p99 {level['p99_ms']} ms  "
            f"({level['lines_measured']}/{level['expected']} lines, runner CPU "
            f"{level['runner_cpu_percent']}%, client CPU {level['client_cpu_percent']}%, "
            f"load {level['load_average_1m']})",
            file=sys.stderr,
        )
    top = levels[-1]
    return {"rate": rate, "levels": levels, "goal_met": top["p99_ms"] < GOAL_P99_MS}


# -- catch-up ---------------------------------------------------------------------------


async def catchup(chunks: int, clients: int, tmp: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"chunks": chunks, "clients": clients}
    async with trio.open_nursery() as nursery:
        # bootstrap + skills logs, the load, writeback log and result: `chunks` in all
        workspace = await start_workspace(nursery, config=_load(chunks - 4, 0.0, 1000))
        proc = await start_runner_process(nursery, "--data-dir", str(tmp / "catchup"))
        async with httpx.AsyncClient(base_url=proc.url, headers=AUTH, timeout=120) as client:
            session_id = await _create(client, workspace)
            status = await wait_state(client, session_id, "completed")
            assert status["last_chunk_id"] == chunks, status
            for accept, name in (("application/x-ndjson", "ndjson"), ("text/event-stream", "sse")):
                received = [0]

                async def reader(accept: str = accept, received: list[int] = received) -> None:
                    stream = await _open_reader(proc.url, session_id, accept)
                    async with stream:
                        while data := await stream.receive_some(262144):
                            received[0] += len(data)
                            if data.endswith(b"0\r\n\r\n"):  # the chunked body's end
                                return

                started = time.perf_counter()
                async with trio.open_nursery() as readers:
                    for _ in range(clients):
                        readers.start_soon(reader)
                seconds = time.perf_counter() - started
                results[name] = {
                    "seconds": round(seconds, 2),
                    "mb_served": round(received[0] / 1e6, 1),
                    "mb_per_s": round(received[0] / 1e6 / seconds, 1),
                }
                print(f"catchup {name}: {results[name]}", file=sys.stderr)
        await proc.stop()
        nursery.cancel_scope.cancel()
    return results


# -- append -----------------------------------------------------------------------------


async def _follow_stored(client: httpx.AsyncClient, session_id: str) -> tuple[int, float]:
    """Follow the session's Durable Stream live (long-poll) to its end: its lines, and
    the seconds from the first stored byte read to the last (a reader sees a line
    once it is stored)."""
    offset = "-1"
    lines = 0
    first = last = 0.0
    while True:
        response = await client.get(
            f"/v1/stream/sessions/{session_id}", params={"offset": offset, "live": "long-poll"}
        )
        if response.status_code == 200 and response.content:
            last = time.perf_counter()
            first = first or last
            lines += response.content.count(b"\n")
        offset = response.headers.get("Stream-Next-Offset", offset)
        if response.headers.get("Stream-Closed") == "true":
            return lines, last - first


async def append(lines: int, payload: int, repeat: int, tmp: Path) -> dict[str, Any]:
    sessions: list[float] = []
    attached: list[float] = []
    data_dir = tmp / "append"
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(nursery, config=_load(lines, 0.0, payload))
        proc = await start_runner_process(nursery, "--data-dir", str(data_dir))
        async with httpx.AsyncClient(base_url=proc.url, headers=AUTH, timeout=300) as client:
            for _ in range(repeat):
                count = 0
                first = 0.0
                async with client.stream(
                    "POST", "/stream", json=workspace.mint_dispatch()
                ) as response:
                    async for chunk in response.aiter_raw():
                        if not first:
                            first = time.perf_counter()
                        count += chunk.count(b"\n")
                attached.append(count / (time.perf_counter() - first))
                session_id = await _create(client, workspace)
                count, seconds = await _follow_stored(client, session_id)
                await wait_state(client, session_id, "completed")
                sessions.append(count / seconds)
                print(
                    f"append: attached {attached[-1]:,.0f} lines/s, session "
                    f"{sessions[-1]:,.0f} lines/s",
                    file=sys.stderr,
                )
        await proc.stop()
        nursery.cancel_scope.cancel()
    ratio = statistics.median(sessions) / statistics.median(attached)
    return {
        "lines": lines,
        "payload_bytes": payload,
        "attached_lines_per_s": round(statistics.median(attached)),
        "session_lines_per_s": round(statistics.median(sessions)),
        "ratio": round(ratio, 2),
        "goal_met": ratio >= GOAL_APPEND_RATIO,
    }


# -- memory -----------------------------------------------------------------------------


async def memory(readers: int, sessions: int, tmp: Path) -> dict[str, Any]:
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(nursery, config=_load(10))
        proc = await start_runner_process(
            nursery, "--data-dir", str(tmp / "memory"), "--max-live", str(sessions + 4)
        )
        runner_ps = psutil.Process(proc.process.pid)
        async with httpx.AsyncClient(base_url=proc.url, headers=AUTH, timeout=120) as client:
            warm = await _create(client, workspace)  # every lazy import done
            await wait_state(client, warm, "completed")
            workspace.config = _sleeping()
            first = await _create(client, workspace)
            with trio.fail_after(60):
                while (await client.get(f"/sessions/{first}/status")).json()["last_chunk_id"] < 3:
                    await trio.sleep(0.05)
            await trio.sleep(1)
            base = runner_ps.memory_info().rss
            ids = [await _create(client, workspace) for _ in range(sessions)]
            with trio.fail_after(120):
                for session_id in ids:
                    while (await client.get(f"/sessions/{session_id}/status")).json()[
                        "last_chunk_id"
                    ] < 3:
                        await trio.sleep(0.05)
            await trio.sleep(1)
            with_sessions = runner_ps.memory_info().rss
            streams = []
            for _ in range(readers):
                streams.append(await _open_reader(proc.url, first, "text/event-stream"))
            for stream in streams:  # each has its backlog and its "caught up" control
                with trio.fail_after(60):
                    while b"upToDate" not in (data := await stream.receive_some(65536)):
                        if not data:
                            raise RuntimeError("the session ended: it should sleep")
            await trio.sleep(1)
            with_readers = runner_ps.memory_info().rss
            for stream in streams:
                await stream.aclose()
            for session_id in [first, *ids]:
                await client.post(f"/sessions/{session_id}/interrupt")
        await proc.stop()
        nursery.cancel_scope.cancel()
    return {
        "readers": readers,
        "sessions": sessions,
        "runner_rss_mb": round(base / 2**20, 1),
        "kib_per_idle_session": round((with_sessions - base) / sessions / 1024, 1),
        "kib_per_idle_reader": round((with_readers - with_sessions) / readers / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=".venv/bin/python -m benchmarks.sessions.run")
    parser.add_argument(
        "parts", nargs="*", default=["fanout", "catchup", "append", "memory"], metavar="PART"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--ladder", default="1,10,100,1000", help="fan-out reader counts")
    parser.add_argument("--rate", type=float, default=50.0, help="fan-out lines/s (50)")
    parser.add_argument("--duration", type=float, default=10.0, help="fan-out measured s (10)")
    parser.add_argument("--warmup", type=float, default=2.0, help="fan-out warm-up s (2)")
    parser.add_argument("--chunks", type=int, default=2000, help="catch-up chunks (2000)")
    parser.add_argument("--clients", type=int, default=1000, help="catch-up readers (1000)")
    parser.add_argument("--lines", type=int, default=1_000_000, help="append lines (1M)")
    parser.add_argument("--payload", type=int, default=64, help="append payload bytes (64)")
    parser.add_argument("--repeat", type=int, default=5, help="append rounds (5)")
    parser.add_argument("--idle-readers", type=int, default=1000, help="memory readers (1000)")
    parser.add_argument("--idle-sessions", type=int, default=20, help="memory sessions (20)")
    args = parser.parse_args(argv)

    async def run() -> dict[str, Any]:
        results: dict[str, Any] = {"environment": environment()}
        with tempfile.TemporaryDirectory(prefix="sandstream-bench-") as name:
            tmp = Path(name)
            if "fanout" in args.parts:
                ladder = [int(n) for n in args.ladder.split(",")]
                results["fanout"] = await fanout(ladder, args.rate, args.duration, args.warmup, tmp)
            if "catchup" in args.parts:
                results["catchup"] = await catchup(args.chunks, args.clients, tmp)
            if "append" in args.parts:
                results["append"] = await append(args.lines, args.payload, args.repeat, tmp)
            if "memory" in args.parts:
                results["memory"] = await memory(args.idle_readers, args.idle_sessions, tmp)
        return results

    results = trio.run(run)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, value in results.items():
            print(f"{name}: {json.dumps(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
