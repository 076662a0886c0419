"""Chat load benchmark: many chat turns at once, each watched live, against the runner's
attached streams under the same load.

``.venv/bin/python -m benchmarks.chat.load [--turns N] [--spread S] [--rates R,R]
[--seconds S] [--payload B] [--serve-arg=ARG ...] [--json]`` (from the checkout: the
``benchmarks`` package is not installed)

Per rate (``--rates``, step lines/s per turn: 10 and 50), a fresh ``sandstream serve``
process (the production shape: the embedded runner, its bwrap sandboxes, durable sessions
and the chat backend, on their defaults but ``--max-live``, raised so that every turn
may run at once, and any ``--serve-arg``) serves two phases, one after the other:

- *runner* (the baseline): ``--turns`` attached ``POST /stream``, their dispatches from a
  workspace server in a process of its own (:mod:`benchmarks.support.workspace`);
- *chat*: ``--turns`` chat turns, ``POST /api/assistant/chat/stream``, each on a new chat,
  with one viewer each: the SSE response that started it.

Each phase starts its turns evenly over ``--spread`` seconds. Every container runs the
scripted agent in load mode: ``--seconds`` x rate step lines paced at the rate, each
stamped ``ts`` by the container as it writes it (Unix epoch ms, this machine's wall
clock). Per step line a viewer receives (an NDJSON line, an SSE ``step`` frame): latency =
the receive time (the wall clock here) - ``ts`` (:mod:`.viewers`). The figures: p50 and
p99 over every step of every turn, per phase; the goal: the chat's p99 within 2x the
runner's. Beside them: the same over the steps stamped after the starts (once the last
turn to stream had its first step), and what says how loaded the machine was: the most
turns streaming at once, the time from a turn's request to its first step, and the CPU
cores each party used (:mod:`.cpu_shares`). One turn of each kind warms the process up first (not
measured); a phase starts, and ends, once ``/healthz`` says no container is live.

Progress every 2 s on stderr. A turn that fails (refused, cut, ended by ``error``) is
counted by its outcome, with its first terminal line, not retried; the run goes on.
Interrupted, the nurseries close every connection and terminate both processes (``serve``
ends its live turns and reaps their containers).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec
import trio

from benchmarks.chat.cpu_shares import CpuMeter
from benchmarks.chat.serving import API_TOKEN, RUNNER_TOKEN, post, serve
from benchmarks.chat.viewers import Phase, Start, view
from benchmarks.runner.support import environment
from benchmarks.support.report import Published, goal_line, progress
from sandstream.core.schemas import ConfigResponse, LoadSpec, ScriptedAgent

GOAL_P99_RATIO: Final = 2.0
PROGRESS_EVERY: Final = 2.0
IDLE_TIMEOUT: Final = 180.0
"""Seconds a phase waits for the containers to be gone, before and after it."""
ROOT: Final = Path(__file__).resolve().parents[2]
CHAT_BODY: Final = {"workspaceId": "bench", "message": "load"}
_SECTION: Final = "Chat: a turn's SSE stream against the runner's NDJSON"
PUBLISHED: Final = {
    "p99_ratio_10": Published(0.70, "", "2 vCPUs, 200 turns", _SECTION),
    "p99_ratio_50": Published(0.50, "", "2 vCPUs, 200 turns", _SECTION),
}
"""The chat p99 / runner p99 docs/benchmarks.md gives at 10 and 50 lines/s (in its
subsection "Under load"); both met the goal."""


def _config(lines: int, rate: float, payload: int) -> ConfigResponse:
    spec = LoadSpec(lines=lines, rate=rate, payload_bytes=payload, line_type="step")
    return ConfigResponse(agent=ScriptedAgent(load=spec, message="loaded"))


async def _workspace(
    nursery: trio.Nursery, agent_config: Path, count: int
) -> tuple[int, list[Any]]:
    """A workspace server answering ``agent_config``, in a process of its own (in
    ``nursery``, whose cancellation terminates it): its pid and ``count`` dispatches."""
    argv = [sys.executable, "-m", "benchmarks.support.workspace", "--config", str(agent_config)]
    argv += ["--dispatches", str(count)]
    run = partial(trio.run_process, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    process: trio.Process = await nursery.start(partial(run, cwd=ROOT, check=False))
    assert process.stdout is not None
    out = b""
    with trio.fail_after(60):
        while out.count(b"\n") < count:
            chunk = await process.stdout.receive_some()
            if not chunk:
                raise RuntimeError("the workspace server exited before its dispatches")
            out += chunk
    return process.pid, [json.loads(line) for line in out.splitlines()]


async def _live(client: httpx.AsyncClient) -> int:
    """Containers live in the serve process now (admitted, not yet gone)."""
    response = await client.get("/healthz")
    response.raise_for_status()
    live: int = response.json()["live"]
    return live


async def _idle(client: httpx.AsyncClient) -> None:
    with trio.fail_after(IDLE_TIMEOUT):
        while await _live(client):
            await trio.sleep(0.5)


async def _progress(name: str, phase: Phase, client: httpx.AsyncClient) -> None:
    began = trio.current_time()
    while True:
        await trio.sleep(PROGRESS_EVERY)
        progress(
            f"{name}: {trio.current_time() - began:3.0f} s, {phase.started}/{phase.turns} "
            f"sent, {phase.streaming} streaming, {phase.ended} ended, "
            f"{await _live(client)} containers live, "
            f"{len(phase.latencies):,}/{phase.turns * phase.lines:,} step events"
        )


async def _phase(
    name: str, phase: Phase, spread: float, start: Start, client: httpx.AsyncClient, meter: CpuMeter
) -> dict[str, Any]:
    """Start ``phase.turns`` turns evenly over ``spread`` s and view each to its end,
    then wait until their containers are gone (a container's CPU counts once it is)."""
    await _idle(client)
    before = meter.sample()
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_progress, name, phase, client)
        async with trio.open_nursery() as viewers:
            for index in range(phase.turns):
                await trio.sleep_until(began + index * spread / phase.turns)
                viewers.start_soon(view, start, phase)
        nursery.cancel_scope.cancel()
    await _idle(client)
    seconds = trio.current_time() - began
    return {
        **phase.summary(),
        "seconds": round(seconds, 1),
        "cpu_cores": meter.cores(before, meter.sample(), seconds),
    }


@dataclass(frozen=True)
class Load:
    """What each phase runs: ``turns`` turns started over ``spread`` s, each ``seconds``
    of step lines of ``payload``-byte results, on a ``serve`` with ``serve_args``."""

    turns: int
    spread: float
    seconds: float
    payload: int
    serve_args: tuple[str, ...]


async def run_rate(rate: float, load: Load) -> dict[str, Any]:
    """Both phases at ``rate`` step lines/s per turn, on a fresh ``serve`` process."""
    turns, spread, seconds = load.turns, load.spread, load.seconds
    lines = max(2, round(rate * seconds / 2) * 2)  # whole running/succeeded pairs
    with tempfile.TemporaryDirectory(prefix="sandstream-bench-load-") as tmp:
        agent_config = Path(tmp) / "agent.json"
        agent_config.write_bytes(msgspec.json.encode(_config(lines, rate, load.payload)))
        async with trio.open_nursery() as nursery:
            progress(f"{rate:g} lines/s: starting sandstream serve and a workspace server")
            workspace, minted = await _workspace(nursery, agent_config, turns + 1)
            dispatches = iter(minted)
            flags = ("--max-live", str(turns + 8), *load.serve_args)
            served = await serve(nursery, Path(tmp) / "data", agent_config, *flags)
            meter = CpuMeter(served.pid, workspace)

            async def runner_turn() -> trio.SocketStream:
                return await post(served.url, "/stream", RUNNER_TOKEN, next(dispatches))

            async def chat_turn() -> trio.SocketStream:
                path = "/api/assistant/chat/stream"
                return await post(served.url, path, API_TOKEN, CHAT_BODY)

            auth = {"Authorization": f"Bearer {RUNNER_TOKEN}"}
            async with httpx.AsyncClient(base_url=served.url, headers=auth, timeout=30) as client:
                progress(f"{rate:g} lines/s: warm-up, one turn of each kind, {seconds:g} s")
                warm = Phase(2, lines)
                async with trio.open_nursery() as warming:
                    warming.start_soon(view, runner_turn, warm)
                    warming.start_soon(view, chat_turn, warm)
                figures = {}
                for name, start in (("runner", runner_turn), ("chat", chat_turn)):
                    label = f"{name} at {rate:g} lines/s"
                    progress(f"{label}: {turns} turns over {spread:g} s, {lines} step lines each")
                    phase = Phase(turns, lines)
                    figures[name] = await _phase(label, phase, spread, start, client, meter)
                    print(f"{label}: {_describe(figures[name])}", file=sys.stderr, flush=True)
            nursery.cancel_scope.cancel()
    ratio = figures["chat"]["p99_ms"] / figures["runner"]["p99_ms"]
    return {
        "rate": rate,
        "lines_per_turn": lines,
        **figures,
        "p99_ratio": round(ratio, 2),
        "goal_met": ratio <= GOAL_P99_RATIO,
        "warm_up_outcomes": dict(warm.outcomes),
        "load_average_1m": environment()["load_average_1m"],
    }


def _describe(figures: dict[str, Any]) -> str:
    """One phase's figures in a paragraph."""
    return (
        f"p50 {figures['p50_ms']:,.2f} ms, p99 {figures['p99_ms']:,.2f} ms, max "
        f"{figures['max_ms']:,.0f} ms; {figures['events']:,}/{figures['expected_events']:,} "
        f"step events; once all streamed: p50 {figures['after_starts']['p50_ms']:,.2f} ms, "
        f"p99 {figures['after_starts']['p99_ms']:,.2f} ms over "
        f"{figures['after_starts']['events']:,} events; outcomes {figures['outcomes']}; "
        f"at most {figures['peak_streaming']} "
        f"streaming at once; request to first step p50 {figures['first_step_s']['p50']} s, "
        f"max {figures['first_step_s']['max']} s; {figures['seconds']:.0f} s; CPU cores "
        f"{figures['cpu_cores']}"
        + "".join(f"\n  {outcome}: {line}" for outcome, line in figures["errors"].items())
    )


async def run(rates: list[float], load: Load) -> dict[str, Any]:
    before = environment()
    results = [await run_rate(rate, load) for rate in rates]
    return {
        "turns": load.turns,
        "spread_s": load.spread,
        "seconds_per_turn": load.seconds,
        "payload_bytes": load.payload,
        "serve_args": list(load.serve_args),
        "rates": results,
        "environment": before,
    }


def _raise_file_limit() -> None:
    """Open files up to the hard limit, here and in the processes started from here
    (each viewer is a socket; each turn a few pipes, sockets and files in ``serve``)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m benchmarks.chat.load", description=__doc__
    )
    parser.add_argument("--turns", type=int, default=200, help="turns per phase (200)")
    parser.add_argument("--spread", type=float, default=4.0, help="seconds to start them (4)")
    parser.add_argument("--rates", default="10,50", help="step lines/s per turn (10,50)")
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds of lines (15)")
    parser.add_argument("--payload", type=int, default=64, help="bytes of a step's result (64)")
    parser.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an argument for sandstream serve, e.g. --serve-arg=--streams-sync=1 (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    _raise_file_limit()
    rates = [float(rate) for rate in args.rates.split(",") if rate]
    load = Load(args.turns, args.spread, args.seconds, args.payload, tuple(args.serve_arg))
    result = trio.run(run, rates, load)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for measured in result["rates"]:
        rate = measured["rate"]
        for name in ("runner", "chat"):
            print(f"{name} at {rate:g} lines/s: {_describe(measured[name])}")
        goal = f"chat p99 <= {GOAL_P99_RATIO:g}x the runner's at {rate:g} lines/s"
        published = PUBLISHED.get(f"p99_ratio_{rate:g}")
        line = f"goal: {goal}; this run: {measured['p99_ratio']:.2f}"
        if published is not None:
            ok = published.value <= GOAL_P99_RATIO
            line = goal_line(
                goal, f"{measured['p99_ratio']:.2f}", measured["goal_met"], published, ok
            )
        print(line)
    print(f"load average (1 min) at the start: {result['environment']['load_average_1m']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
