"""Line throughput of the core's façade against the baselines, side by side.

``.venv/bin/python -m benchmarks.core.run [--lines N] [--chunk-size BYTES] [--repeat R] [--json]``

Generates one trace (:mod:`benchmarks.core.generate`), checks that the façade and the
baseline processors agree on it (frames, events, steps, terminal, diagnostics), then
feeds it in chunks to each implementation in turn, ``R`` rounds with the
implementations interleaved within each round, and reports the median (and best) of
the rounds. Every timed run starts after a full ``gc.collect()`` with the collector in
the same state for all (enabled by default; ``--no-gc`` disables it while timing).
Timing covers ``feed`` of every chunk plus ``close``; building the processor, and
freeing it, do not count. Rates and ratios use wall time (``time.perf_counter``); the
``CPU lines/s`` column (``time.process_time``, median) is less sensitive to other
processes on a shared machine. ``spread`` is (slowest - fastest) / median round.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Final

import msgspec
import pydantic

from benchmarks.support.report import Published, goal_line

from .baselines import (
    NaiveProcessor,
    Processor,
    PydanticProcessor,
    TypedDecodeCeiling,
    UntypedDecodeCeiling,
)
from .generate import DEFAULT_LINES, DEFAULT_SEED, generate_trace, trace_stats

try:
    from sandstream.core import StreamProcessor
except ImportError:  # the façade is not there yet (or broken): baselines only
    StreamProcessor = None  # type: ignore[assignment,misc,unused-ignore]

__all__ = ["IMPLEMENTATIONS", "Measurement", "OutputSummary", "main", "summarize"]

FACADE: Final = "sandstream StreamProcessor"
NAIVE: Final = "naive stdlib json"
PYDANTIC: Final = "pydantic v2"
CEILING: Final = "ceiling: typed msgspec decode"
UNTYPED: Final = "ceiling: untyped msgspec decode"

GOAL_VS_NAIVE: Final = 6.0
GOAL_VS_CEILING: Final = 0.35
_SECTION: Final = "Core: line throughput of `StreamProcessor`"
PUBLISHED_VS_NAIVE: Final = Published(7.27, "x", "2 vCPUs, load 1.0 (the lower run)", _SECTION)
PUBLISHED_VS_CEILING: Final = Published(0.37, "", "2 vCPUs, load 1.0 (the lower run)", _SECTION)
"""The façade's ratios docs/benchmarks.md gives (both met their goals)."""


def _implementations() -> dict[str, Callable[[], Processor]]:
    impls: dict[str, Callable[[], Processor]] = {}
    if StreamProcessor is not None:
        # Every implementation folds every step: the facade without its step bounds.
        impls[FACADE] = partial(StreamProcessor, max_steps=sys.maxsize, max_step_bytes=sys.maxsize)
    impls[NAIVE] = NaiveProcessor
    impls[PYDANTIC] = PydanticProcessor
    impls[CEILING] = TypedDecodeCeiling
    impls[UNTYPED] = UntypedDecodeCeiling
    return impls


IMPLEMENTATIONS: Final = _implementations()
_PROCESSORS: Final = (FACADE, NAIVE, PYDANTIC)
"""The implementations that do the whole job (the others only decode)."""


def chunked(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into ``size``-byte chunks, as a socket might deliver it."""
    return [data[i : i + size] for i in range(0, len(data), size)]


@dataclass
class OutputSummary:
    """What an implementation made of a trace, for comparing implementations."""

    frames: int
    events: dict[str, int]
    ids_consecutive: bool
    terminal: str
    steps: int
    step_statuses: dict[str, int]
    diagnostics: int
    output_bytes: int


def parse_frames(sse: bytes) -> list[tuple[int, str, bytes]]:
    """Split SSE output into ``(id, event, data)``; data lines are joined with LF."""
    frames = []
    for block in sse.split(b"\n\n"):
        if not block:
            continue
        fields: dict[bytes, list[bytes]] = {}
        for field_line in block.split(b"\n"):
            name, _, value = field_line.partition(b": ")
            fields.setdefault(name, []).append(value)
        frames.append(
            (int(fields[b"id"][0]), fields[b"event"][0].decode(), b"\n".join(fields[b"data"]))
        )
    return frames


def _state(name: str, proc: Any) -> tuple[int, Counter[str], int]:
    """Step count, step statuses and diagnostic count held by a processor."""
    if name == FACADE:
        statuses = Counter(str(row.status) for row in proc.turn.steps)
        return len(proc.turn.steps), statuses, proc.turn.diagnostic_count
    rows = proc.steps.values()
    statuses = Counter(row["status"] if isinstance(row, dict) else row.status for row in rows)
    return len(proc.steps), statuses, len(proc.diagnostics)


def summarize(name: str, chunks: list[bytes]) -> tuple[OutputSummary, list[tuple[int, str, bytes]]]:
    """Run one implementation untimed; summarize its output and state."""
    proc = IMPLEMENTATIONS[name]()
    out = b"".join([proc.feed(chunk) for chunk in chunks]) + proc.close()
    frames = parse_frames(out)
    events = Counter(event for _, event, _ in frames)
    terminal = "none"
    for _, event, data in frames:
        if event in ("result", "error"):
            terminal = event if event == "result" else f"error:{json.loads(data)['code']}"
    steps, statuses, diagnostics = _state(name, proc)
    summary = OutputSummary(
        frames=len(frames),
        events=dict(sorted(events.items())),
        ids_consecutive=[i for i, _, _ in frames] == list(range(1, len(frames) + 1)),
        terminal=terminal,
        steps=steps,
        step_statuses=dict(sorted(statuses.items())),
        diagnostics=diagnostics,
        output_bytes=len(out),
    )
    return summary, frames


class DisagreementError(RuntimeError):
    """Two implementations made different output of the same trace."""


def verify(names: list[str], chunks: list[bytes], lines: int) -> dict[str, OutputSummary]:
    """Check the processors agree (frame by frame, data compared as JSON) and the
    ceilings decoded every line; raise :class:`DisagreementError` if not."""
    summaries: dict[str, OutputSummary] = {}
    reference: tuple[str, list[tuple[int, str, Any]]] | None = None
    for name in names:
        if name not in _PROCESSORS:
            proc = IMPLEMENTATIONS[name]()
            for chunk in chunks:
                proc.feed(chunk)
            proc.close()
            if proc.rejected:  # type: ignore[attr-defined]
                raise DisagreementError(f"{name}: rejected {proc.rejected} lines of the trace")  # type: ignore[attr-defined]
            continue
        summary, frames = summarize(name, chunks)
        summaries[name] = summary
        if not summary.ids_consecutive:
            raise DisagreementError(f"{name}: SSE ids are not 1, 2, 3, …")
        if summary.terminal != "result" or summary.diagnostics:
            raise DisagreementError(f"{name}: expected a clean turn, got {summary}")
        parsed = [(i, event, json.loads(data)) for i, event, data in frames]
        if reference is None:
            reference = (name, parsed)
            continue
        ref_name, ref_frames = reference
        ref = summaries[ref_name]
        if (summary.frames, summary.events, summary.steps, summary.step_statuses) != (
            ref.frames,
            ref.events,
            ref.steps,
            ref.step_statuses,
        ):
            raise DisagreementError(f"{name} and {ref_name} disagree:\n  {summary}\n  {ref}")
        for mine, theirs in zip(parsed, ref_frames, strict=True):
            if mine != theirs:
                raise DisagreementError(
                    f"{name} and {ref_name} disagree on frame {theirs[0]}:\n  {mine}\n  {theirs}"
                )
    del lines
    return summaries


@dataclass
class Measurement:
    """Timings of one implementation over the rounds, and the rates they give."""

    name: str
    seconds: list[float]
    cpu_seconds: list[float]
    lines: int
    bytes: int

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_seconds)

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.median

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.median / 1e6


def time_once(
    factory: Callable[[], Processor], chunks: list[bytes], gc_enabled: bool
) -> tuple[float, float]:
    """Wall and CPU seconds to feed every chunk to a fresh processor and close it."""
    proc = factory()
    gc.collect()
    if not gc_enabled:
        gc.disable()
    try:
        feed = proc.feed
        cpu_start = time.process_time()
        start = time.perf_counter()
        for chunk in chunks:
            feed(chunk)
        proc.close()
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    finally:
        gc.enable()
    del proc, feed
    gc.collect()
    return elapsed, cpu


def measure(
    names: list[str], chunks: list[bytes], lines: int, repeat: int, gc_enabled: bool
) -> dict[str, Measurement]:
    """Time each implementation ``repeat`` times, interleaved, after one warm-up run each."""
    size = sum(map(len, chunks))
    results = {name: Measurement(name, [], [], lines, size) for name in names}
    for name in names:  # warm-up: imports, caches, allocator arenas
        time_once(IMPLEMENTATIONS[name], chunks[: max(1, len(chunks) // 10)], gc_enabled)
    for round_ in range(repeat):
        # Rotate the order each round so no implementation always runs first.
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            wall, cpu = time_once(IMPLEMENTATIONS[name], chunks, gc_enabled)
            results[name].seconds.append(wall)
            results[name].cpu_seconds.append(cpu)
    return results


def report(results: dict[str, Measurement]) -> dict[str, Any]:
    """Rates and ratios per implementation, as a JSON-ready dict."""
    naive = results.get(NAIVE)
    ceiling = results.get(CEILING)
    rows = []
    for m in results.values():
        rows.append(
            {
                "implementation": m.name,
                "lines_per_s": m.lines_per_s,
                "mb_per_s": m.mb_per_s,
                "best_lines_per_s": m.lines / m.best,
                "cpu_lines_per_s": m.lines / m.cpu_median,
                "vs_naive": naive.median / m.median if naive else None,
                "vs_ceiling": ceiling.median / m.median if ceiling else None,
                "seconds": m.seconds,
                "cpu_seconds": m.cpu_seconds,
            }
        )
    return {"results": rows}


def format_table(rows: list[dict[str, Any]]) -> str:
    """The results as a fixed-width text table."""
    header = (
        "implementation",
        "lines/s",
        "MB/s",
        "best lines/s",
        "CPU lines/s",
        "x naive",
        "x ceiling",
        "spread",
    )
    body = []
    for row in rows:
        secs = row["seconds"]
        spread = (max(secs) - min(secs)) / statistics.median(secs)
        body.append(
            (
                row["implementation"],
                f"{row['lines_per_s']:,.0f}",
                f"{row['mb_per_s']:.1f}",
                f"{row['best_lines_per_s']:,.0f}",
                f"{row['cpu_lines_per_s']:,.0f}",
                "-" if row["vs_naive"] is None else f"{row['vs_naive']:.2f}",
                "-" if row["vs_ceiling"] is None else f"{row['vs_ceiling']:.2f}",
                f"{spread:.0%}",
            )
        )
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = []
    for r in [header, *body]:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit status 1 if the implementations disagree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=DEFAULT_LINES)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--chunk-size", type=int, default=64 * 1024, help="bytes per feed()")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (median reported)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--no-gc", action="store_true", help="disable gc while timing")
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="substring of implementation names"
    )
    args = parser.parse_args(argv)
    if args.chunk_size < 1 or args.repeat < 1 or args.lines < 1:
        parser.error("--lines, --chunk-size and --repeat must be positive")

    names = list(IMPLEMENTATIONS)
    if args.only:
        names = [n for n in names if any(s.lower() in n.lower() for s in args.only)]
    if StreamProcessor is None:
        print(
            "warning: sandstream.core.StreamProcessor not importable; no façade column",
            file=sys.stderr,
        )

    data = generate_trace(args.lines, args.seed)
    stats = trace_stats(data)
    chunks = chunked(data, args.chunk_size)
    try:
        summaries = verify(names, chunks, args.lines)
    except DisagreementError as exc:
        print(f"error: implementations disagree, not timing: {exc}", file=sys.stderr)
        return 1
    load_before = os.getloadavg()[0]
    results = measure(names, chunks, args.lines, args.repeat, not args.no_gc)
    load_after = os.getloadavg()[0]
    out = report(results)
    facade = next((r for r in out["results"] if r["implementation"] == FACADE), None)
    goals = None
    if facade and facade["vs_naive"] is not None and facade["vs_ceiling"] is not None:
        goals = {
            "vs_naive": {"goal": GOAL_VS_NAIVE, "met": facade["vs_naive"] >= GOAL_VS_NAIVE},
            "vs_ceiling": {"goal": GOAL_VS_CEILING, "met": facade["vs_ceiling"] >= GOAL_VS_CEILING},
        }
    env = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "msgspec": msgspec.__version__,
        "pydantic": pydantic.VERSION,
        "chunk_size": args.chunk_size,
        "repeat": args.repeat,
        "gc": "disabled while timing" if args.no_gc else "enabled",
        "statistic": "median of rounds",
        "cpus": os.cpu_count(),
        "load_average_1m": [round(load_before, 2), round(load_after, 2)],
    }
    if args.json:
        doc = {
            "trace": stats.to_dict(),
            "environment": env,
            "agreement": {name: asdict(s) for name, s in summaries.items()},
            **out,
            "goals": goals,
        }
        json.dump(doc, sys.stdout, indent=2, ensure_ascii=False)
        print()
        return 0
    print(f"trace: {stats.summary()}")
    print(
        f"feeds of {args.chunk_size:,} B, median of {args.repeat} interleaved rounds, gc "
        f"{env['gc']}; Python {env['python']}, msgspec {env['msgspec']}, pydantic {env['pydantic']}"
    )
    agreed = ", ".join(summaries)
    if summaries:
        first = next(iter(summaries.values()))
        print(
            f"agreement checked ({agreed}): {first.frames:,} frames, {first.steps:,} steps, "
            f"terminal {first.terminal}"
        )
    # The benchmark itself keeps one CPU busy: a 1-minute load much above 1 means others ran.
    if max(load_before, load_after) > 1.5:
        print(
            f"warning: machine busy (1-min load {load_before:.1f} → {load_after:.1f} on "
            f"{os.cpu_count()} CPUs); timings are noisy"
        )
    print()
    print(format_table(out["results"]))
    if goals:
        print()
        print(
            goal_line(
                f"the façade >= {GOAL_VS_NAIVE:g}x the naive stdlib processor",
                f"{facade['vs_naive']:.2f}x",  # type: ignore[index]
                goals["vs_naive"]["met"],
                PUBLISHED_VS_NAIVE,
                PUBLISHED_VS_NAIVE.value >= GOAL_VS_NAIVE,
            )
        )
        print(
            goal_line(
                f"the façade >= {GOAL_VS_CEILING:.0%} of the typed-decode ceiling",
                f"{facade['vs_ceiling']:.2f}",  # type: ignore[index]
                goals["vs_ceiling"]["met"],
                PUBLISHED_VS_CEILING,
                PUBLISHED_VS_CEILING.value >= GOAL_VS_CEILING,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
