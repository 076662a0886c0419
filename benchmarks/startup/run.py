"""Start-up cost of a launcher: time to the first line of a turn, local vs bwrap.

``python -m benchmarks.startup.run [--trials 200] [--container real|shell|both] [--json]``

Each trial posts a turn to a runner (Hypercorn on loopback, in this process) and times
the client's request → the first NDJSON line it receives. The launchers alternate
trial by trial (``local``, ``bwrap``, ``local``, …) on one runner each, so both see
the same machine; the difference is what the sandbox adds. ``real`` is the container
(Python start-up, ``/env`` and ``/config`` redeemed, then its first log line);
``shell`` prints one line at once, which leaves the launcher's own cost.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Final

import httpx
import trio

from sandstream.container.schemas import ConfigResponse, ScriptedAgent
from sandstream.server import (
    BwrapLauncher,
    ContainerLauncher,
    LocalSubprocessLauncher,
    RunnerSettings,
)
from sandstream.server.runner.launcher import DEFAULT_CONTAINER_ARGV
from tests.support.workspace import start_workspace

from ..runner.support import TOKEN, environment, start_in_process, summary

SHELL_CONTAINER: Final = 'cat >/dev/null; echo \'{"type":"result","message":"hi"}\''
SANDBOXES: Final = ("local", "bwrap")


def _launcher(sandbox: str, kind: str) -> ContainerLauncher:
    argv = DEFAULT_CONTAINER_ARGV if kind == "real" else ("sh", "-c", SHELL_CONTAINER)
    if sandbox == "bwrap":
        return BwrapLauncher(argv=argv, stderr="discard")
    return LocalSubprocessLauncher(argv=argv, stderr="discard")


async def _first_line(client: httpx.AsyncClient, dispatch: dict[str, Any]) -> float:
    started = time.monotonic()
    async with client.stream("POST", "/stream", json=dispatch) as response:
        async for _ in response.aiter_raw():
            return (time.monotonic() - started) * 1000
    raise RuntimeError("the stream ended without a line")


async def _trials(kind: str, trials: int, warmup: int) -> dict[str, Any]:
    settings = RunnerSettings(token=TOKEN, max_live=4)
    times: dict[str, list[float]] = {sandbox: [] for sandbox in SANDBOXES}
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(
            nursery, config=ConfigResponse(agent=ScriptedAgent(message="hi"))
        )
        servers = {
            sandbox: await start_in_process(nursery, settings, _launcher(sandbox, kind))
            for sandbox in SANDBOXES
        }
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for index in range(warmup + trials):
            for sandbox in SANDBOXES:
                url = servers[sandbox].url
                async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
                    elapsed = await _first_line(client, workspace.mint_dispatch())
                if index >= warmup:
                    times[sandbox].append(elapsed)
        for server in servers.values():
            server.stop.set()
        nursery.cancel_scope.cancel()
    return {"container": kind, **{f"{s}_ms": summary(times[s]) for s in SANDBOXES}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--container", choices=("real", "shell", "both"), default="both")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    kinds = ["shell", "real"] if args.container == "both" else [args.container]
    env = environment()
    results = [trio.run(_trials, kind, args.trials, args.warmup) for kind in kinds]
    if args.json:
        print(json.dumps({"environment": env, "results": results}, indent=2))
        return 0
    print(f"time to first line (ms), local vs bwrap; {env}")
    for result in results:
        local, bwrap = result["local_ms"], result["bwrap_ms"]
        print(f"container={result['container']}:")
        for name, stats in (("local", local), ("bwrap", bwrap)):
            print(
                f"  {name:<6} p50 {stats['p50']:8.2f}  p95 {stats['p95']:8.2f}  "
                f"p99 {stats['p99']:8.2f}  (n={stats['n']})"
            )
        print(f"  bwrap adds (p50): {bwrap['p50'] - local['p50']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
