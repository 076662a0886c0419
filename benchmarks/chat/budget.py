"""The chat's budget per line: what the runner's path does against what the chat adds.

``.venv/bin/python -m benchmarks.chat.budget [--lines N] [--payload B] [--repeat R] [--json]``

In one process, no I/O, over the container's own load-mode step lines (as
``benchmarks.chat.run`` streams them):

- *core*: the validation and fold every line gets on its way out of a sandbox, in
  the runner's ``POST /stream`` and in a session alike (``StreamProcessor("ndjson")``
  fed 256 KiB reads, as the runner reads the container's stdout);
- *render*: what a chat viewer adds to each line the session stored: its SSE frame
  (:func:`~sandstream.server.chat.turns.frames.live_frames` over each run the core wrote,
  as the session hands a run to its caught-up viewers).

µs per line, the best of ``--repeat`` passes. The chat's stream runs both on one GIL
while the runner runs the first alone, so ``core / (core + render)`` bounds the
chat's rate against the runner's before anything is stored or moved.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sandstream.container.agents.scripted import encode_load_lines
from sandstream.core import StreamProcessor
from sandstream.core.schemas import LoadSpec
from sandstream.server.chat.turns.frames import live_frames

from ..runner.support import environment

READ_SIZE = 256 * 1024
T = TypeVar("T")


def _best(repeat: int, work: Callable[[], T]) -> tuple[float, T]:
    """The shortest of ``repeat`` runs of ``work``, in seconds, and its last result."""
    best = float("inf")
    result: T | None = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - started)
    assert result is not None
    return best, result


def measure(lines: int, payload: int, repeat: int) -> dict[str, Any]:
    spec = LoadSpec(lines=lines, payload_bytes=payload, line_type="step")
    data = encode_load_lines(0, lines, spec, ts=1_763_884_800_000)
    reads = [data[at : at + READ_SIZE] for at in range(0, len(data), READ_SIZE)]

    def core() -> list[tuple[bytes, int]]:
        processor = StreamProcessor("ndjson")
        runs = []
        for read in reads:
            before = processor.written
            run = processor.feed(read)
            runs.append((run, processor.written - before))
        return runs

    core_seconds, runs = _best(repeat, core)
    if sum(count for _, count in runs) != lines:
        raise RuntimeError("the core refused some of the load lines")

    def render() -> int:
        first = 1
        size = 0
        for run, count in runs:
            size += len(live_frames(first, run, count))
            first += count
        return size

    render_seconds, _ = _best(repeat, render)
    core_us = core_seconds / lines * 1e6
    render_us = render_seconds / lines * 1e6
    return {
        "lines": lines,
        "line_bytes": round(len(data) / lines, 1),
        "core_us": round(core_us, 3),
        "render_us": round(render_us, 3),
        "render_over_core": round(render_us / core_us, 3),
        "bound": round(core_us / (core_us + render_us), 3),
        **environment(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m benchmarks.chat.budget", description=__doc__
    )
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--payload", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.lines, args.payload, args.repeat)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{result['lines']} step lines of {result['line_bytes']} bytes: core "
        f"{result['core_us']} µs/line, chat render {result['render_us']} µs/line "
        f"({result['render_over_core']} of the core); chat / runner at most "
        f"{result['bound']} before storing; load {result['load_average_1m']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
