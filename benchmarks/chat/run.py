"""Chat benchmark: a chat turn's SSE stream against the runner's NDJSON, same container.

``.venv/bin/python -m benchmarks.chat.run [--lines N] [--payload B] [--repeat R] [--json]``
(from the checkout: the ``benchmarks`` package is not installed)

One ``sandstream serve`` process (the production shape: the embedded runner, its
durable sessions and the chat backend) serves both sides; this process reads over
loopback as raw HTTP/1.1 sockets, counting step lines (NDJSON) or step frames (SSE)
only, so that the readers cost little. The container runs in load mode: ``--lines``
unpaced step lines of ``--payload``-byte results, then its result.

- *runner*: ``POST /stream`` with a dispatch from a workspace server in this
  process (the same container, agent and lines): step lines/s, first to last;
- *chat*: ``POST /api/assistant/chat/stream`` (container → runner → session buffer →
  chat → SSE): step events/s from the first step frame to the last one (the
  stream's rate), and to ``done`` (which waits for the turn to settle: the fold of
  every chunk into the stored message, once);
- *disk*: the bytes the ``serve`` process wrote to disk over that chat turn (from its
  start to ``done``, and the stores' next checkpoint), per byte of the session's
  chunks: each stored once in the session's stream, plus the stored message (the log
  mover folds the chunks as they come; it keeps no copy of them by default).

Interleaved ``--repeat`` times; medians. Goal: chat ≥ 80% of the runner's rate. Each
step says on stderr what it starts; the figures are printed next to the published ones
(:data:`PUBLISHED`, docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec
import psutil
import trio

from benchmarks.chat.serving import API_TOKEN, RUNNER_TOKEN, post, serve
from benchmarks.runner.support import environment
from benchmarks.support.report import Published, figure_line, goal_line, progress
from benchmarks.support.workspace import start_workspace
from sandstream.core.schemas import ConfigResponse, LoadSpec, ScriptedAgent

GOAL_RATIO: Final = 0.8
CHECKPOINT_WAIT: Final = 2.0
"""Seconds for the stores' background checkpoints to write what a turn left."""
_SECTION: Final = "Chat: a turn's SSE stream against the runner's NDJSON"
PUBLISHED: Final = {
    "runner_lines_per_s": Published(973_614, "lines/s", "2 vCPUs, 1M lines", _SECTION),
    "disk_bytes_per_chunk_byte": Published(1.02, "", "2 vCPUs, 1M lines", _SECTION),
    "chat_events_per_s": Published(816_727, "events/s", "2 vCPUs, 1M lines", _SECTION),
    "chat_events_per_s_to_done": Published(809_961, "events/s", "2 vCPUs, 1M lines", _SECTION),
    "ratio": Published(0.84, "", "2 vCPUs, 1M lines", _SECTION),
}
"""The figures docs/benchmarks.md gives (1M lines, 7 rounds); the published ratio met
the goal."""
_NAMES: Final = {
    "runner_lines_per_s": "runner POST /stream",
    "disk_bytes_per_chunk_byte": "disk bytes per chunk byte",
    "chat_events_per_s": "chat SSE",
    "chat_events_per_s_to_done": "chat SSE, to done",
}


def _config(lines: int, payload: int) -> ConfigResponse:
    spec = LoadSpec(lines=lines, payload_bytes=payload, line_type="step")
    return ConfigResponse(agent=ScriptedAgent(load=spec, message="loaded"))


class TooShortToTimeError(Exception):
    """Every line of a turn came in one read: a rate needs more ``--lines``."""


async def _count(stream: trio.SocketStream, marker: bytes) -> tuple[int, float, float, bytes]:
    """Occurrences of ``marker`` in the raw response, the times of the first and the
    last chunk holding one, and the response head. Raises :class:`TooShortToTimeError`
    when one chunk held them all."""
    found = 0
    first = last = 0.0
    tail = head = b""
    async with stream:
        while chunk := await stream.receive_some(256 * 1024):
            if not head:
                head = chunk[: chunk.find(b"\r\n\r\n")]
            window = tail + chunk
            more = window.count(marker) - tail.count(marker)
            tail = chunk[-len(marker) :]
            if more:
                now = time.perf_counter()
                first = first or now
                last = now
                found += more
    if last <= first:
        raise TooShortToTimeError(
            f"all {found} steps of the turn came in one read, too few to time: ask for more --lines"
        )
    return found, first, last, head


async def _runner_rate(url: str, dispatch: Any) -> tuple[int, float]:
    """Step lines and step lines/s of ``POST /stream`` (first step line → last)."""
    stream = await post(url, "/stream", RUNNER_TOKEN, dispatch)
    steps, first, last, _ = await _count(stream, b'{"type":"step"')
    return steps, steps / (last - first)


@dataclass(frozen=True)
class ChatRound:
    """One chat turn read to its end: step events, events/s from the first step frame
    to the last and to ``done`` (the turn stored), the seconds from the last step frame
    to ``done`` (the settle: the fold of every chunk, stored), the session id."""

    steps: int
    rate: float
    rate_to_done: float
    settle: float
    session_id: str


async def _chat_rate(url: str) -> ChatRound:
    """A chat turn on ``url``, read to its end (:class:`ChatRound`)."""
    body = {"workspaceId": "bench", "message": "load"}
    stream = await post(url, "/api/assistant/chat/stream", API_TOKEN, body)
    steps, first, last, head = await _count(stream, b"event: step\n")
    done = time.perf_counter()
    session_id = head.split(b"x-session-id: ", 1)[1].split(b"\r\n", 1)[0].decode()
    return ChatRound(steps, steps / (last - first), steps / (done - first), done - last, session_id)


async def _chunk_bytes(url: str, session_id: str) -> int:
    """The bytes of the session's chunks (its Durable Stream read to its end)."""
    total = 0
    offset = "-1"
    headers = {"Authorization": f"Bearer {RUNNER_TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as client:
        while True:
            response = await client.get(
                f"/v1/stream/sessions/{session_id}", params={"offset": offset}
            )
            total += len(response.content)
            offset = response.headers["Stream-Next-Offset"]
            if response.headers.get("Stream-Up-To-Date") == "true":
                return total


def _written(pid: int) -> int:
    return int(psutil.Process(pid).io_counters().write_bytes)


async def run(lines: int, payload: int, repeat: int) -> dict[str, Any]:
    runner: list[float] = []
    chat: list[float] = []
    chat_done: list[float] = []
    disk: list[float] = []
    config = _config(lines, payload)
    with tempfile.TemporaryDirectory(prefix="sandstream-bench-chat-") as tmp:
        agent_config = Path(tmp) / "agent.json"
        agent_config.write_bytes(msgspec.json.encode(config))
        async with trio.open_nursery() as nursery:
            workspace = await start_workspace(nursery, config=config)
            progress("starting sandstream serve")
            served = await serve(nursery, Path(tmp) / "data", agent_config)
            url = served.url
            with trio.fail_after(repeat * 300):
                for round_ in range(1, repeat + 1):
                    progress(f"round {round_}/{repeat}: the runner's POST /stream, {lines:,} lines")
                    count, rate = await _runner_rate(url, workspace.mint_dispatch())
                    runner.append(rate)
                    progress(f"round {round_}/{repeat}: a chat turn, {lines:,} lines")
                    await trio.sleep(CHECKPOINT_WAIT)  # the runner turn's writes settle
                    written = _written(served.pid)
                    turn = await _chat_rate(url)
                    steps, rate, to_done = turn.steps, turn.rate, turn.rate_to_done
                    chat.append(rate)
                    chat_done.append(to_done)
                    await trio.sleep(CHECKPOINT_WAIT)
                    written = _written(served.pid) - written
                    disk.append(written / await _chunk_bytes(url, turn.session_id))
                    print(
                        f"runner {runner[-1]:,.0f} lines/s ({count}); chat {rate:,.0f} "
                        f"events/s ({steps}), {to_done:,.0f}/s to done; disk "
                        f"{disk[-1]:.2f} bytes per chunk byte",
                        file=sys.stderr,
                    )
            nursery.cancel_scope.cancel()
    ratio = statistics.median(chat) / statistics.median(runner)
    return {
        "lines": lines,
        "payload_bytes": payload,
        "repeat": repeat,
        "runner_lines_per_s": round(statistics.median(runner)),
        "disk_bytes_per_chunk_byte": round(statistics.median(disk), 2),
        "chat_events_per_s": round(statistics.median(chat)),
        "chat_events_per_s_to_done": round(statistics.median(chat_done)),
        "ratio": round(ratio, 2),
        "ratios": [round(c / r, 2) for c, r in zip(chat, runner, strict=True)],
        "goal_met": ratio >= GOAL_RATIO,
        "environment": environment(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m benchmarks.chat.run", description=__doc__
    )
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--payload", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        result = trio.run(run, args.lines, args.payload, args.repeat)
    except* TooShortToTimeError as group:
        sys.exit(f"{parser.prog}: {group.exceptions[0]}")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, name in _NAMES.items():
            print(figure_line(name, result[key], PUBLISHED[key]))
        print(
            goal_line(
                f"chat >= {GOAL_RATIO:g} of the runner's rate",
                f"{result['ratio']:.2f}",
                result["goal_met"],
                PUBLISHED["ratio"],
                PUBLISHED["ratio"].value >= GOAL_RATIO,
            )
        )
        print(f"load average (1 min): {result['environment']['load_average_1m']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
