"""The kernel's part of a teardown: ``SIGKILL`` → a Python container's process gone.

``.venv/bin/python -m benchmarks.teardown.exit_floor [--trials 200] [--heap huge|small|both]
[--fifo] [--busy N] [--json]``

No runner, no sandbox, no client: each trial starts a Python process that imports
what ``python -m sandstream.container`` runs with (the container's CLI, its agent
loop, trio, httpx, msgspec, an ``httpx.AsyncClient``) and, with ``--heap huge``, is
started and collapsed the way the launchers ship it
(:mod:`sandstream.container.huge_pages`). Once it has said it is ready and gone
idle, this process ``SIGKILL``s it and times until its pidfd is readable (the process
has exited: its memory is freed). ``--fifo`` first puts it at ``SCHED_FIFO``
priority 1, as the bwrap launcher does with a sandbox it kills.

This is a floor under ``benchmarks.teardown.run``'s *total*: a teardown adds to it the
runner's reaction to the client's close and the sandbox's own exit (bwrap's init).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any, Final

from sandstream.server.runner.huge_pages import heap_env

from ..runner.support import HEAPS, busy_processes, environment, summary

CHILD: Final = """
import sys
from sandstream.container import cli, run
from sandstream.container.huge_pages import collapse_heap, forget_heap_tunables
import httpx, msgspec, trio
client = httpx.AsyncClient()  # its SSL context, as the container's workspace client has
if sys.argv[1] == "huge" and forget_heap_tunables():  # as the container does
    collapse_heap()
sys.stdout.write("ready\\n")
sys.stdout.flush()
sys.stdin.read()
"""


def _trial(heap: str, fifo: bool) -> float:
    """One process started, killed and waited for: ms from the kill to its exit."""
    env = {name: value for name, value in os.environ.items() if name != "GLIBC_TUNABLES"}
    if heap == "huge":
        env.update(heap_env())
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, heap],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        if child.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the child did not start (status {child.wait()})")
        time.sleep(0.02)  # idle, as a container waiting on its model
        pidfd = os.pidfd_open(child.pid)
        try:
            if fifo:
                os.sched_setscheduler(child.pid, os.SCHED_FIFO, os.sched_param(1))
            killed = time.perf_counter()
            os.kill(child.pid, signal.SIGKILL)
            select.select([pidfd], [], [])
            return (time.perf_counter() - killed) * 1000
        finally:
            os.close(pidfd)
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m benchmarks.teardown.exit_floor", description=__doc__
    )
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--heap", choices=(*HEAPS, "both"), default="both")
    parser.add_argument("--fifo", action="store_true", help="kill it at SCHED_FIFO 1")
    parser.add_argument("--busy", type=int, default=0, help="CPU-spinning processes meanwhile")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    heaps = HEAPS if args.heap == "both" else (args.heap,)
    times: dict[str, list[float]] = {heap: [] for heap in heaps}
    before = environment()
    with busy_processes(args.busy):
        for index in range(args.trials):
            order = heaps if index % 2 == 0 else heaps[::-1]  # interleaved
            for heap in order:
                times[heap].append(_trial(heap, args.fifo))
    result: dict[str, Any] = {
        "busy": args.busy,
        "fifo": args.fifo,
        "load_before": before["load_average_1m"],
        "load_after": environment()["load_average_1m"],
        "exit_ms": {heap: summary(values) for heap, values in times.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"SIGKILL -> exited, {args.trials} trials, fifo={args.fifo}, busy={args.busy}, "
        f"load {result['load_before']} -> {result['load_after']}"
    )
    for heap, stats in result["exit_ms"].items():
        print(
            f"  {heap:5}  p50 {stats['p50']:.2f}  p95 {stats['p95']:.2f}  "
            f"p99 {stats['p99']:.2f}  max {stats['max']:.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
