"""Runner benchmarks: throughput vs. the pipe ceiling, concurrent streams, memory per stream.

``.venv/bin/python -m benchmarks.runner.run [throughput] [concurrency] [--sandbox bwrap|local]
[--heap huge|small|both] [--json] [options]``

The runner runs its containers with ``--sandbox`` (default ``bwrap``, as
``sandstream runner`` does on Linux with bubblewrap installed).

**throughput** — lines/s from a container in load mode (``--lines`` lines of
``--payload`` bytes, unpaced), measured from the first byte to the last:

- *ceiling*: the same container command piped straight into a reader in this process
  (trio, 256 KiB reads, counting newlines) — nothing can beat it;
- *runner*: ``sandstream runner`` as its own process, the container's stdout through the
  core to Hypercorn, over loopback to an httpx client (HTTP/1.1) in this process.

Each is run ``--repeat`` times, interleaved; the median is reported. Goal: the runner
delivers at least 50% of the ceiling. ``--heap both`` runs both twice, interleaved:
the container as shipped (``huge``: started with the heap tunables, as launchers start
it, so its heap is in huge pages where the host allows) and without them (``small``:
the ceiling's container without the tunables, the runner's given as a custom
``--container-cmd``, which gets none).

**concurrency** — N streams at ``--rate`` lines/s each (default 100), for N on a
ladder (``--ladder``); per line, latency = client receive time - the line's ``ts``
(stamped by the container as it emits it). After all N streams are flowing and a
warm-up, ``--duration`` seconds are measured. The answer is the largest N whose p99
stays under 50 ms. For reference, each level also runs the same N containers read
straight from their pipes by this process (*direct*: no runner, no HTTP), which is the
machine's own limit. Each level runs on a fresh runner process, whose RSS is sampled
idle (after one warm-up turn) and with the N streams live: the difference over N is the
runner's memory per live stream (the containers' own RSS is reported separately).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, Final

import httpx
import msgspec
import psutil
import trio

from benchmarks.support.report import Published, goal_line
from benchmarks.support.workspace import WorkspaceServer, start_workspace
from sandstream.core.schemas import ConfigResponse, LoadSpec, ScriptedAgent
from sandstream.server.runner.huge_pages import heap_env

from .support import (
    CONTAINER_ARGV,
    HEAPS,
    TOKEN,
    environment,
    percentile,
    start_runner_process,
)

GOAL_RATIO: Final = 0.5
PUBLISHED_RATIO: Final = Published(
    0.63, "", "2 vCPUs, bwrap, huge heap", "Runner: teardown, throughput, concurrency, memory"
)
"""The throughput ratio docs/benchmarks.md gives (it met the goal)."""
GOAL_P99_MS: Final = 50.0
AUTH: Final = {"Authorization": f"Bearer {TOKEN}"}


def _load_config(lines: int, rate: float, payload: int) -> ConfigResponse:
    spec = LoadSpec(lines=lines, rate=rate, payload_bytes=payload)
    return ConfigResponse(agent=ScriptedAgent(load=spec, message="loaded"))


# -- throughput ----------------------------------------------------------------------


async def _ceiling(workspace: WorkspaceServer, env: dict[str, str]) -> tuple[int, float]:
    """Lines and seconds (first byte → EOF) of the container piped into a reader."""
    process = await trio.lowlevel.open_process(
        list(CONTAINER_ARGV),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    assert process.stdin is not None and process.stdout is not None
    async with process.stdin:
        await process.stdin.send_all(msgspec.json.encode(workspace.mint_dispatch()))
    lines = 0
    first = 0.0
    async with process.stdout:
        while chunk := await process.stdout.receive_some(256 * 1024):
            if not first:
                first = time.perf_counter()
            lines += chunk.count(b"\n")
    elapsed = time.perf_counter() - first
    await process.wait()
    return lines, elapsed


async def _through_runner(url: str, workspace: WorkspaceServer) -> tuple[int, float]:
    """Lines and seconds (first byte → end) through the runner to an httpx client."""
    lines = 0
    first = 0.0
    async with (
        httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120) as client,
        client.stream("POST", "/stream", json=workspace.mint_dispatch()) as response,
    ):
        async for chunk in response.aiter_raw():
            if not first:
                first = time.perf_counter()
            lines += chunk.count(b"\n")
    return lines, time.perf_counter() - first


SMALL_PAGES_CONTAINER: Final = shlex.join((sys.executable, "-E", "-m", "sandstream.container"))
"""The container as a custom command (``-E`` changes nothing in a sandbox's allow-listed
environment): launchers start a custom command without the heap tunables."""


def _heap_setup(heap: str, runner_args: list[str]) -> tuple[dict[str, str], list[str]]:
    """(the ceiling container's extra environment, the runner's arguments) for ``heap``."""
    if heap == "huge":
        return heap_env(), runner_args
    return {}, [*runner_args, "--container-cmd", SMALL_PAGES_CONTAINER]


async def throughput(
    lines: int, payload: int, repeat: int, runner_args: list[str], heaps: list[str]
) -> list[dict[str, Any]]:
    """Ceiling and runner lines/s per heap variant (:data:`HEAPS`), all interleaved
    ``repeat`` times (``runner_args``: the runner's CLI)."""
    ceiling: dict[str, list[float]] = {heap: [] for heap in heaps}
    runner: dict[str, list[float]] = {heap: [] for heap in heaps}
    counts: set[int] = set()
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(nursery, config=_load_config(lines, 0.0, payload))
        setups = {heap: _heap_setup(heap, runner_args) for heap in heaps}
        procs = {
            heap: await start_runner_process(nursery, "--max-live", "8", *setups[heap][1])
            for heap in heaps
        }
        try:
            for _ in range(repeat):
                for heap in heaps:
                    n, seconds = await _ceiling(workspace, setups[heap][0])
                    counts.add(n)
                    ceiling[heap].append(n / seconds)
                    n, seconds = await _through_runner(procs[heap].url, workspace)
                    counts.add(n)
                    runner[heap].append(n / seconds)
        finally:
            for proc in procs.values():
                await proc.stop()
        nursery.cancel_scope.cancel()
    results = []
    for heap in heaps:
        ceiling_rate = statistics.median(ceiling[heap])
        runner_rate = statistics.median(runner[heap])
        results.append(
            {
                "heap": heap,
                "lines_per_turn": sorted(counts),
                "payload_bytes": payload,
                "repeat": repeat,
                "ceiling_lines_per_s": round(ceiling_rate),
                "runner_lines_per_s": round(runner_rate),
                "ratio": round(runner_rate / ceiling_rate, 3),
                "ceiling_runs": [round(x) for x in ceiling[heap]],
                "runner_runs": [round(x) for x in runner[heap]],
            }
        )
    return results


# -- concurrency ----------------------------------------------------------------------


class _LatencyMeter:
    """Line latencies (receipt time minus the line's ``ts``) across concurrent streams.

    Each stream feeds its raw chunks to the observer :meth:`stream` gives it;
    :attr:`all_flowing` is set once every stream has delivered something; lines count
    only while ``measuring``.
    """

    def __init__(self, streams: int) -> None:
        self.streams = streams
        self.flowing = 0
        self.all_flowing = trio.Event()
        self.measuring = False
        self.latencies: list[float] = []

    def stream(self) -> Callable[[bytes | bytearray], None]:
        """An observer for one stream's chunks."""
        decoder = msgspec.json.Decoder()
        started = False
        pending = b""

        def observe(chunk: bytes | bytearray) -> None:
            nonlocal started, pending
            now_ms = time.time() * 1000
            if not started:
                started = True
                self.flowing += 1
                if self.flowing == self.streams:
                    self.all_flowing.set()
            if not self.measuring:
                return
            *complete, pending = (pending + chunk).split(b"\n")
            for line in complete:
                ts = decoder.decode(line).get("ts")
                if ts is not None:
                    self.latencies.append(now_ms - ts)

        return observe

    def percentiles(self) -> dict[str, float]:
        return {q: round(percentile(self.latencies, n), 2) for q, n in _QUANTILES}


_QUANTILES = (("p50", 50), ("p95", 95), ("p99", 99))


async def _level(
    streams: int, rate: float, duration: float, warmup: float, payload: int, runner_args: list[str]
) -> dict[str, Any]:
    """N concurrent streams at ``rate`` lines/s: p99 latency and memory."""
    meter = _LatencyMeter(streams)
    total_lines = int(rate * (duration + warmup + 120))
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(nursery, config=_load_config(total_lines, rate, payload))
        proc = await start_runner_process(nursery, "--max-live", str(streams + 8), *runner_args)
        runner_ps = psutil.Process(proc.process.pid)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=streams + 8)
        async with httpx.AsyncClient(
            base_url=proc.url, headers=AUTH, timeout=300, limits=limits
        ) as client:
            # one warm-up turn so that the idle RSS includes every lazy import
            workspace.config = _load_config(10, 0.0, payload)
            await client.post("/stream", json=workspace.mint_dispatch())
            workspace.config = _load_config(total_lines, rate, payload)
            await trio.sleep(0.5)
            idle_rss = runner_ps.memory_info().rss

            async def stream() -> None:
                observe = meter.stream()
                async with client.stream(
                    "POST", "/stream", json=workspace.mint_dispatch()
                ) as response:
                    async for chunk in response.aiter_raw():
                        observe(bytes(chunk))

            async with trio.open_nursery() as streams_nursery:
                for _ in range(streams):
                    streams_nursery.start_soon(stream)
                with trio.fail_after(600):
                    await meter.all_flowing.wait()
                await trio.sleep(warmup)
                meter.measuring = True
                load_before = os.getloadavg()[0]
                me = psutil.Process()
                cpu_before = _cpu(runner_ps), _cpu(me), _children_cpu(runner_ps)
                rss_samples = []
                end = trio.current_time() + duration
                while trio.current_time() < end:
                    rss_samples.append(runner_ps.memory_info().rss)
                    await trio.sleep(0.5)
                meter.measuring = False
                cpu_after = _cpu(runner_ps), _cpu(me), _children_cpu(runner_ps)
                cpu_pct = [
                    round((after - before) / duration * 100)
                    for before, after in zip(cpu_before, cpu_after, strict=True)
                ]
                container_rss = _rss(runner_ps.children(recursive=True))
                streams_nursery.cancel_scope.cancel()
        await proc.stop()
        nursery.cancel_scope.cancel()
    live_rss = statistics.median(rss_samples)
    return {
        "streams": streams,
        "lines_measured": len(meter.latencies),
        "expected_lines": int(streams * rate * duration),
        "latency_ms": {
            **meter.percentiles(),
            "max": round(max(meter.latencies), 2) if meter.latencies else None,
        },
        "runner_rss_idle_mb": round(idle_rss / 2**20, 1),
        "runner_rss_live_mb": round(live_rss / 2**20, 1),
        "runner_kib_per_stream": round((live_rss - idle_rss) / streams / 1024, 1),
        "container_rss_mb_mean": round(container_rss / streams / 2**20, 1),
        "cpu_percent": dict(zip(("runner", "client", "containers"), cpu_pct, strict=True)),
        "load_average_1m": round(load_before, 2),
    }


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _children_cpu(process: psutil.Process) -> float:
    """CPU seconds of the runner's live containers: every process under the runner
    (a sandbox's bwrap, its init and the container), not those already gone."""
    total = 0.0
    for child in process.children(recursive=True):
        try:
            total += _cpu(child)
        except psutil.Error:
            continue
    return total


def _rss(processes: list[psutil.Process]) -> int:
    """The summed RSS of ``processes`` (those gone meanwhile count 0)."""
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total


async def _direct_level(
    streams: int, rate: float, duration: float, warmup: float, payload: int
) -> dict[str, Any]:
    """The same N containers read straight from their pipes (no runner, no HTTP)."""
    meter = _LatencyMeter(streams)
    total_lines = int(rate * (duration + warmup + 120))
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(nursery, config=_load_config(total_lines, rate, payload))

        async def stream() -> None:
            process = await trio.lowlevel.open_process(
                list(CONTAINER_ARGV),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert process.stdin is not None and process.stdout is not None
            try:
                async with process.stdin:
                    await process.stdin.send_all(msgspec.json.encode(workspace.mint_dispatch()))
                observe = meter.stream()
                while chunk := await process.stdout.receive_some(65536):
                    observe(chunk)
            finally:
                with trio.CancelScope(shield=True):
                    process.kill()
                    await process.wait()

        async with trio.open_nursery() as streams_nursery:
            for _ in range(streams):
                streams_nursery.start_soon(stream)
            with trio.fail_after(600):
                await meter.all_flowing.wait()
            await trio.sleep(warmup)
            meter.measuring = True
            await trio.sleep(duration)
            meter.measuring = False
            streams_nursery.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    return meter.percentiles()


async def concurrency(
    ladder: list[int],
    rate: float,
    duration: float,
    warmup: float,
    payload: int,
    runner_args: list[str],
) -> dict[str, Any]:
    """Climb ``ladder`` until p99 passes the goal; each level also run direct."""
    levels = []
    best = 0
    for streams in ladder:
        level = await _level(streams, rate, duration, warmup, payload, runner_args)
        level["direct_latency_ms"] = await _direct_level(streams, rate, duration, warmup, payload)
        levels.append(level)
        _print_level(level)
        if level["latency_ms"]["p99"] <= GOAL_P99_MS:
            best = streams
        else:
            break
    return {"rate_per_stream": rate, "duration_s": duration, "levels": levels, "max_streams": best}


def _print_level(level: dict[str, Any]) -> None:
    lat = level["latency_ms"]
    direct = level["direct_latency_ms"]
    print(
        f"  {level['streams']:4d} streams: p50 {lat['p50']:7.2f} p95 {lat['p95']:7.2f} "
        f"p99 {lat['p99']:7.2f} ms (direct p50 {direct['p50']:.2f} p99 {direct['p99']:.2f}); "
        f"lines {level['lines_measured']}/{level['expected_lines']}; "
        f"runner RSS {level['runner_rss_idle_mb']} -> {level['runner_rss_live_mb']} MiB "
        f"({level['runner_kib_per_stream']} KiB/stream); sandbox RSS "
        f"{level['container_rss_mb_mean']} MiB each; CPU % {level['cpu_percent']}; "
        f"load {level['load_average_1m']}",
        flush=True,
    )


# -- main ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "parts", nargs="*", choices=("throughput", "concurrency"), default=[], metavar="PART"
    )
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--payload", type=int, default=64, help="payload bytes per line")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rate", type=float, default=100.0, help="lines/s per stream")
    parser.add_argument("--ladder", default="10,25,50,75,100,150,200,300")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument(
        "--sandbox",
        choices=("bwrap", "local"),
        default="bwrap",
        help="the runner's launcher (default: bwrap)",
    )
    parser.add_argument(
        "--runner-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra runner argument, e.g. --runner-arg=--read-size=65536",
    )
    parser.add_argument(
        "--heap",
        choices=(*HEAPS, "both"),
        default="huge",
        help="throughput: the container's heap in huge pages as shipped, or not (both: "
        "interleaved)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    parts = args.parts or ["throughput", "concurrency"]
    runner_args = ["--sandbox", args.sandbox, *args.runner_arg]
    doc: dict[str, Any] = {"environment": environment(), "sandbox": args.sandbox}
    if "throughput" in parts:
        heaps = list(HEAPS) if args.heap == "both" else [args.heap]
        results = trio.run(throughput, args.lines, args.payload, args.repeat, runner_args, heaps)
        doc["throughput"] = results
        for result in results:
            if args.json:
                break
            print(
                f"throughput, heap={result['heap']} "
                f"({result['lines_per_turn']} lines of {args.payload} B): "
                f"ceiling {result['ceiling_lines_per_s']:,} lines/s, "
                f"runner {result['runner_lines_per_s']:,} lines/s\n"
                f"  runs: ceiling {result['ceiling_runs']}, runner {result['runner_runs']}\n  "
                + goal_line(
                    f"the runner >= {GOAL_RATIO:g} of the ceiling (the container piped straight)",
                    f"{result['ratio']:.2f}",
                    result["ratio"] >= GOAL_RATIO,
                    PUBLISHED_RATIO,
                    PUBLISHED_RATIO.value >= GOAL_RATIO,
                ),
                flush=True,
            )
    if "concurrency" in parts:
        ladder = [int(x) for x in args.ladder.split(",") if x]
        if not args.json:
            print(f"concurrency at {args.rate:g} lines/s per stream (p99 goal {GOAL_P99_MS} ms):")
        result = trio.run(
            concurrency, ladder, args.rate, args.duration, args.warmup, args.payload, runner_args
        )
        doc["concurrency"] = result
        if not args.json:
            print(f"  max streams with p99 <= {GOAL_P99_MS:g} ms: {result['max_streams']}")
    doc["load_average_after"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(
            f"sandbox: {args.sandbox}; environment: {doc['environment']}; "
            f"load after {doc['load_average_after']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
