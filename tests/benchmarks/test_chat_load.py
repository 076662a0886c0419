"""``benchmarks.chat.load`` at a tiny size, so that it keeps running: both phases against a
real ``sandstream serve``, each checking what its viewers saw; and its step-stamp reader,
fed byte by byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.chat.viewers import StepStamps

ROOT = Path(__file__).resolve().parents[2]


def test_both_phases_run_at_every_rate_and_every_viewer_sees_every_step() -> None:
    tiny = ["--turns", "3", "--spread", "0.3", "--rates", "20,40", "--seconds", "0.5", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.chat.load", *tiny],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "... chat at 40 lines/s: 3 turns over 0.3 s, 20 step lines each" in done.stderr
    result = json.loads(done.stdout)
    assert [measured["rate"] for measured in result["rates"]] == [20, 40]
    for measured in result["rates"]:
        for name in ("runner", "chat"):
            phase = measured[name]
            assert phase["outcomes"] == {"result": 3}, phase["errors"]
            assert phase["events"] == phase["expected_events"] == 3 * measured["lines_per_turn"]
            assert 0 < phase["p50_ms"] <= phase["p99_ms"] <= phase["max_ms"]
            assert 0 < phase["after_starts"]["events"] < phase["events"]
            assert 1 <= phase["peak_streaming"] <= 3 and phase["first_step_s"]["p50"] > 0
            assert phase["cpu_cores"]["serve"] > 0 and phase["cpu_cores"]["containers"] > 0
        assert measured["p99_ratio"] > 0


def _feed_bytewise(stamps: StepStamps, data: bytes) -> list[int]:
    found = []
    for i in range(len(data)):
        found += stamps.feed(data[i : i + 1])
    return found


STEP = b'{"type":"step","id":"load_0","name":"load","status":"running","args":{"seq":0},"ts":%d}'
RESULT = b'{"type":"result","message":"loaded","ts":1700000000300}'


def test_the_stamps_of_step_lines_are_read_wherever_the_pieces_end() -> None:
    lines = [STEP % 1700000000100, b'{"type":"log","level":"info","message":"x","ts":5}']
    lines += [STEP % 1700000000200, RESULT]
    ndjson = b"HTTP/1.1 200 \r\ntransfer-encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n%s\n\r\n" % (len(line) + 1, line) for line in lines
    )
    sse = b"HTTP/1.1 200 \r\ncontent-type: text/event-stream\r\n\r\n" + b"".join(
        b"id: %d\nevent: %s\ndata: %s\n\n" % (i, event, line)
        for i, (event, line) in enumerate(
            [(b"step", lines[0]), (b"step", lines[2]), (b"result", RESULT)], 1
        )
    )
    for response in (ndjson, sse):
        for stamps, found in (
            (whole := StepStamps(), whole.feed(response)),
            (bytewise := StepStamps(), _feed_bytewise(bytewise, response)),
        ):
            assert found == [1700000000100, 1700000000200]
            assert stamps.outcome() == "result"


def test_a_turn_that_fails_says_how() -> None:
    error = StepStamps()
    error.feed(b'HTTP/1.1 200 \r\n\r\n{"type":"error","code":"unauthorized","message":"no"}\n')
    assert error.outcome() == "error unauthorized"
    assert error.terminal_line == '{"type":"error","code":"unauthorized","message":"no"}'
    refused = StepStamps()
    refused.feed(b"HTTP/1.1 503 \r\ncontent-type: application/problem+json\r\n\r\n{}")
    assert refused.outcome() == "HTTP 503"
    cut = StepStamps()
    cut.feed(b"HTTP/1.1 200 \r\n\r\n" + STEP % 1 + b"\n")
    assert cut.outcome() == "cut"
