"""The warm pool: request → the container's first line, warm against cold, same run.

``.venv/bin/python -m benchmarks.warm.run [--trials 100] [--sandbox bwrap|local]
[--network isolated|sealed|host|none] [--json]``

Two runners in this process (Hypercorn on loopback), the same launcher and the real
container (``/env`` and ``/config`` redeemed, then its first log line): one with no
pool, every turn started cold; one with a pool of one, whose sandbox is waited for
(untimed) before each of its trials, so each claims a ready one. Trials alternate, cold
then warm, so both see the same machine. Progress goes to stderr; p50/p95/p99 (ms) to
stdout, and the memory a ready sandbox holds while it waits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Any

import httpx
import psutil
import trio

from benchmarks.support.workspace import start_workspace
from sandstream.core.schemas import ConfigResponse, ScriptedAgent
from sandstream.server import (
    BwrapLauncher,
    ContainerLauncher,
    LocalSubprocessLauncher,
    RunnerSettings,
)
from sandstream.server.runner import NETWORK_MODES, network_mode
from sandstream.server.runner.pool import WarmPool

from ..runner.support import TOKEN, environment, start_in_process, summary

KINDS = ("cold", "warm")


def _launcher(sandbox: str, network: str) -> ContainerLauncher:
    if sandbox == "bwrap":
        return BwrapLauncher(stderr="discard", network=network_mode(network))
    return LocalSubprocessLauncher(stderr="discard")


async def _first_line(client: httpx.AsyncClient, dispatch: dict[str, Any]) -> float:
    started = time.monotonic()
    async with client.stream("POST", "/stream", json=dispatch) as response:
        if response.status_code != 200:
            raise RuntimeError(f"POST /stream answered {response.status_code}")
        async for _ in response.aiter_raw():
            return (time.monotonic() - started) * 1000
    raise RuntimeError("the stream ended without a line")


def _idle_rss(pool: WarmPool) -> int:
    """Bytes resident in the processes of the pool's ready sandboxes (bwrap, the
    container; a local container alone), shared pages counted in each."""
    total = 0
    for _, handle in pool.ready():
        root = psutil.Process(int(handle.id.split(":")[1]))
        for process in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
    return total


async def _trials(sandbox: str, network: str, trials: int, warmup: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(
            nursery, config=ConfigResponse(agent=ScriptedAgent(message="hi"))
        )
        servers = {
            kind: await start_in_process(
                nursery,
                RunnerSettings(token=TOKEN, max_live=4, warm_pool=int(kind == "warm")),
                _launcher(sandbox, network),
            )
            for kind in KINDS
        }
        pool = servers["warm"].runner.pool
        assert pool is not None
        headers = {"Authorization": f"Bearer {TOKEN}"}
        clients = {
            kind: httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60)
            for kind, server in servers.items()
        }
        for index in range(warmup + trials):
            for kind in KINDS:
                if kind == "warm":
                    with trio.fail_after(60):
                        while pool.warm < 1:
                            await trio.sleep(0.005)
                elapsed = await _first_line(clients[kind], workspace.mint_dispatch())
                with trio.fail_after(60):  # untimed: the turn's container is gone
                    while servers[kind].runner.live:
                        await trio.sleep(0.005)
                if index >= warmup:
                    times[kind].append(elapsed)
            if (index + 1) % 10 == 0:
                print(
                    f"warm: {index + 1}/{warmup + trials} trials "
                    f"(cold {times['cold'][-1:]}, warm {times['warm'][-1:]})",
                    file=sys.stderr,
                    flush=True,
                )
        for client in clients.values():
            await client.aclose()
        with trio.fail_after(60):
            while pool.warm < 1:
                await trio.sleep(0.005)
        rss_mb = _idle_rss(pool) / 2**20
        claims, misses = pool.claimed, pool.misses
        for server in servers.values():
            await server.shutdown()
        nursery.cancel_scope.cancel()
    return {
        "sandbox": sandbox,
        "network": network,
        "claims": claims,
        "misses": misses,
        "idle_rss_mb": round(rss_mb, 1),
        **{f"{kind}_ms": summary(times[kind]) for kind in KINDS},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sandbox", choices=("bwrap", "local"), default="bwrap")
    parser.add_argument(
        "--network",
        choices=[mode for mode in NETWORK_MODES if mode != "none"],  # none: no callbacks
        default="isolated",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    env = environment()
    network = args.network if args.sandbox == "bwrap" else "host"  # local: the host's
    result = trio.run(_trials, args.sandbox, network, args.trials, args.warmup)
    if args.json:
        print(json.dumps({"environment": env, "result": result}, indent=2))
        return 0
    print(f"request → first line (ms), {args.sandbox}, network {network}; {env}")
    for kind in KINDS:
        stats = result[f"{kind}_ms"]
        print(
            f"  {kind:<5} p50 {stats['p50']:8.2f}  p95 {stats['p95']:8.2f}  "
            f"p99 {stats['p99']:8.2f}  (n={stats['n']})"
        )
    cold, warm = result["cold_ms"]["p50"], result["warm_ms"]["p50"]
    print(
        f"  warm/cold p50: {warm / cold:.3f}; claims {result['claims']}, misses {result['misses']}"
    )
    print(f"  a ready sandbox holds {result['idle_rss_mb']} MB resident (RSS, shared pages too)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
