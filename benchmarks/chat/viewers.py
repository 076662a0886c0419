"""The load benchmark's viewers: one raw HTTP response per turn, read to its end, each
step line's latency taken from its ``ts``.

A viewer (:func:`view`) sends its turn's request (a :data:`Start`), then reads the raw
response, NDJSON or SSE alike: :class:`StepStamps` scans whole lines only, for a step
line's ``ts`` (Unix epoch ms, stamped by the container as it wrote the line) and the
turn's terminal line, and parses nothing else, so that hundreds of viewers in one trio
process cost little. Per step line: latency = the wall clock when the piece holding it was
received - ``ts``. What every viewer of a phase saw goes into one :class:`Phase`.

A viewer never raises for its turn's failure: a refused connection, a non-200 answer, a
response cut before its terminal line or an ``error`` line is the turn's outcome, counted
in the phase. Cancelled, it closes its connection (the turn's server then sees the
client leave) and counts nothing.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from benchmarks.runner.support import percentile

__all__ = ["Phase", "Start", "StepStamps", "view"]

_STAMP: Final = re.compile(rb'\{"type":"step"[^\n]*?"ts":(\d+)')
_TERMINAL: Final = re.compile(rb'\{"type":"(result|error)"(?:,"code":"([^"]*)")?[^\n]*')

Start = Callable[[], Awaitable[trio.SocketStream]]
"""Sends one turn's request; the connection to read its response from."""


class StepStamps:
    """The ``ts`` of each step line in a raw HTTP response, NDJSON or SSE, fed in pieces.

    Pieces may end anywhere: only whole lines are scanned, a piece's tail waits for the
    next. A step line is one that holds a step object from its start (an SSE frame's
    ``data:`` line carries the envelope line as it is). Also notes the response's status
    and its terminal line (:meth:`outcome`, :attr:`terminal_line`).
    """

    def __init__(self) -> None:
        self._pending = b""
        self._status = ""
        self._terminal = ""
        self.terminal_line = ""
        """The terminal line as it came (an error's message says what failed)."""

    def feed(self, data: bytes) -> list[int]:
        """The stamps of the step lines this piece completes."""
        data = self._pending + data
        end = data.rfind(b"\n") + 1
        self._pending = data[end:]
        if not end:
            return []
        if not self._status:
            self._status = data.split(b" ", 2)[1].decode()
        if not self._terminal and (found := _TERMINAL.search(data, 0, end)):
            kind, code = found.groups()
            self._terminal = kind.decode() if code is None else f"error {code.decode()}"
            self.terminal_line = found[0].decode(errors="replace")
        return [int(ts) for ts in _STAMP.findall(data, 0, end)]

    def outcome(self) -> str:
        """``result``, ``error <code>``, ``HTTP <status>`` (not 200), or ``cut`` (no
        terminal line)."""
        if self._status and self._status != "200":
            return f"HTTP {self._status}"
        return self._terminal or "cut"


@dataclass
class Phase:
    """What one phase's viewers saw, as it goes: ``turns`` turns of ``lines`` step lines."""

    turns: int
    lines: int
    latencies: list[float] = field(default_factory=list)
    """Milliseconds, one per step line received."""
    stamps: list[int] = field(default_factory=list)
    """The ``ts`` of each, in the same order."""
    first_step: list[float] = field(default_factory=list)
    """Seconds from a turn's request sent to its first step line received."""
    last_start_ms: float = 0.0
    """When the last turn to start streaming received its first step line (epoch ms)."""
    started: int = 0
    streaming: int = 0
    """Turns that received a step line and have not ended yet."""
    peak_streaming: int = 0
    ended: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: dict[str, str] = field(default_factory=dict)
    """The first terminal line of each outcome but ``result``."""

    def summary(self) -> dict[str, Any]:
        """The figures, as the benchmark reports them; ``after_starts``: those of the
        steps stamped once the last turn to stream had its first step (when no turn
        starts any more)."""
        after = [
            latency
            for stamp, latency in zip(self.stamps, self.latencies, strict=True)
            if stamp >= self.last_start_ms
        ]
        return {
            "p50_ms": round(percentile(self.latencies, 50), 2),
            "p99_ms": round(percentile(self.latencies, 99), 2),
            "max_ms": round(max(self.latencies, default=0.0), 2),
            "events": len(self.latencies),
            "expected_events": self.turns * self.lines,
            "after_starts": {
                "p50_ms": round(percentile(after, 50), 2),
                "p99_ms": round(percentile(after, 99), 2),
                "events": len(after),
            },
            "outcomes": dict(self.outcomes),
            "errors": self.errors,
            "peak_streaming": self.peak_streaming,
            "first_step_s": {
                "p50": round(percentile(self.first_step, 50), 2),
                "max": round(max(self.first_step, default=0.0), 2),
            },
        }


async def view(start: Start, phase: Phase) -> None:
    """One turn: its request sent, its response read to the end, into ``phase``."""
    stamps = StepStamps()
    streaming = False
    try:
        sent = time.monotonic()
        stream = await start()
        phase.started += 1
        async with stream:
            while data := await stream.receive_some(65536):
                now_ms = time.time() * 1000
                found = stamps.feed(data)
                phase.latencies.extend(now_ms - ts for ts in found)
                phase.stamps.extend(found)
                if found and not streaming:
                    streaming = True
                    phase.first_step.append(time.monotonic() - sent)
                    phase.last_start_ms = max(phase.last_start_ms, now_ms)
                    phase.streaming += 1
                    phase.peak_streaming = max(phase.peak_streaming, phase.streaming)
        outcome = stamps.outcome()
        line = stamps.terminal_line
    except OSError as exc:
        outcome = line = f"connection: {exc}"
    finally:
        phase.streaming -= streaming
    phase.outcomes[outcome] += 1
    if outcome != "result":
        phase.errors.setdefault(outcome, line)
    phase.ended += 1
