"""Start-up cost of a launcher: time to the first line of a turn, local vs bwrap.

``.venv/bin/python -m benchmarks.startup.run [--trials 200] [--container real|shell|both]
[--heap huge|small|both] [--json]``

Each trial posts a turn to a runner (Hypercorn on loopback, in this process) and times
the client's request → the first NDJSON line it receives. The launchers alternate
trial by trial (``local``, ``bwrap``, ``local``, …) on one runner each, so both see
the same machine; the difference is what the sandbox adds. ``--heap both`` runs each
launcher twice, as shipped (``huge``: the container's heap in huge pages where the
host allows) and without that (``small``), alternating too. ``real`` is the container
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

from benchmarks.support.workspace import start_workspace
from sandstream.core.schemas import ConfigResponse, ScriptedAgent
from sandstream.server import RunnerSettings
from sandstream.server.runner.launcher import DEFAULT_CONTAINER_ARGV

from ..runner.support import HEAPS, TOKEN, environment, launcher, start_in_process, summary

SHELL_CONTAINER: Final = 'cat >/dev/null; echo \'{"type":"result","message":"hi"}\''
SANDBOXES: Final = ("local", "bwrap")


def _variants(heaps: list[str]) -> list[tuple[str, str]]:
    """(sandbox, heap) pairs, named ``bwrap`` or ``bwrap/small`` in the results."""
    return [(sandbox, heap) for heap in heaps for sandbox in SANDBOXES]


def _name(sandbox: str, heap: str) -> str:
    return sandbox if heap == "huge" else f"{sandbox}/{heap}"


async def _first_line(client: httpx.AsyncClient, dispatch: dict[str, Any]) -> float:
    started = time.monotonic()
    async with client.stream("POST", "/stream", json=dispatch) as response:
        async for _ in response.aiter_raw():
            return (time.monotonic() - started) * 1000
    raise RuntimeError("the stream ended without a line")


async def _trials(kind: str, heaps: list[str], trials: int, warmup: int) -> dict[str, Any]:
    settings = RunnerSettings(token=TOKEN, max_live=4)
    argv = DEFAULT_CONTAINER_ARGV if kind == "real" else ("sh", "-c", SHELL_CONTAINER)
    variants = _variants(heaps)
    times: dict[str, list[float]] = {_name(*variant): [] for variant in variants}
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(
            nursery, config=ConfigResponse(agent=ScriptedAgent(message="hi"))
        )
        servers = {
            _name(sandbox, heap): await start_in_process(
                nursery, settings, launcher(sandbox, argv, heap)
            )
            for sandbox, heap in variants
        }
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for index in range(warmup + trials):
            for name, server in servers.items():
                async with httpx.AsyncClient(
                    base_url=server.url, headers=headers, timeout=60
                ) as client:
                    elapsed = await _first_line(client, workspace.mint_dispatch())
                if index >= warmup:
                    times[name].append(elapsed)
        for server in servers.values():
            server.stop.set()
        nursery.cancel_scope.cancel()
    return {"container": kind, **{f"{name}_ms": summary(times[name]) for name in times}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--container", choices=("real", "shell", "both"), default="both")
    parser.add_argument("--heap", choices=(*HEAPS, "both"), default="huge")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    kinds = ["shell", "real"] if args.container == "both" else [args.container]
    heaps = list(HEAPS) if args.heap == "both" else [args.heap]
    env = environment()
    results = [trio.run(_trials, kind, heaps, args.trials, args.warmup) for kind in kinds]
    if args.json:
        print(json.dumps({"environment": env, "results": results}, indent=2))
        return 0
    print(f"time to first line (ms), local vs bwrap; {env}")
    for result in results:
        print(f"container={result['container']}:")
        for sandbox, heap in _variants(heaps):
            stats = result[f"{_name(sandbox, heap)}_ms"]
            print(
                f"  {_name(sandbox, heap):<12} p50 {stats['p50']:8.2f}  p95 {stats['p95']:8.2f}  "
                f"p99 {stats['p99']:8.2f}  (n={stats['n']})"
            )
        for heap in heaps:
            local = result[f"{_name('local', heap)}_ms"]
            bwrap = result[f"{_name('bwrap', heap)}_ms"]
            print(f"  bwrap adds (p50, heap={heap}): {bwrap['p50'] - local['p50']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
