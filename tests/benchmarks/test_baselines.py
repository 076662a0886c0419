"""The benchmark's baselines do the same job as the façade: same frames, steps, diagnostics.

A correctness check of ``benchmarks/core``, not a timing test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from benchmarks.core.baselines import (
    NaiveProcessor,
    PydanticProcessor,
    TypedDecodeCeiling,
    UntypedDecodeCeiling,
)
from benchmarks.core.generate import generate_trace, trace_stats
from benchmarks.core.run import chunked, parse_frames
from sandstream.core import StreamProcessor

Factory = Callable[..., Any]
PROCESSORS: dict[str, Factory] = {
    "facade": StreamProcessor,
    "naive": NaiveProcessor,
    "pydantic": PydanticProcessor,
}


def _run(factory: Factory, data: bytes, chunk_size: int, **kwargs: Any) -> tuple[Any, bytes]:
    proc = factory(**kwargs)
    out = b"".join(proc.feed(chunk) for chunk in chunked(data, chunk_size)) + proc.close()
    return proc, out


def _observed(proc: Any, out: bytes) -> dict[str, Any]:
    """Frames (data parsed as JSON), step statuses and diagnostic count."""
    frames = [(i, event, json.loads(data)) for i, event, data in parse_frames(out)]
    if isinstance(proc, StreamProcessor):
        statuses = {row.id: row.status for row in proc.turn.steps}
        diagnostics = proc.turn.diagnostic_count
    else:
        statuses = {
            sid: row["status"] if isinstance(row, dict) else row.status
            for sid, row in proc.steps.items()
        }
        diagnostics = len(proc.diagnostics)
    return {"frames": frames, "steps": statuses, "diagnostics": diagnostics}


def _assert_all_agree(data: bytes, chunk_size: int, **kwargs: Any) -> dict[str, Any]:
    results = {
        name: _observed(*_run(f, data, chunk_size, **kwargs)) for name, f in PROCESSORS.items()
    }
    reference = results["facade"]
    for name, result in results.items():
        assert result["diagnostics"] == reference["diagnostics"], name
        assert result["steps"] == reference["steps"], name
        assert result["frames"] == reference["frames"], name
    return reference


@pytest.mark.parametrize("chunk_size", [1, 7, 250, 4096, 1 << 30])
def test_generated_trace(chunk_size: int) -> None:
    lines = 400 if chunk_size == 1 else 3000
    data = generate_trace(lines, seed=7)
    ref = _assert_all_agree(data, chunk_size)
    stats = trace_stats(data)
    frames = ref["frames"]
    assert [f[0] for f in frames] == list(range(1, len(frames) + 1))
    assert len(frames) == stats.by_type["step"] + 2  # steps, the result, done
    assert frames[-2][1] == "result"
    assert frames[-1][1:] == ("done", {"terminal": "result", "diagnostics": 0})
    assert ref["diagnostics"] == 0
    assert len(ref["steps"]) == stats.by_status["running"]


ADVERSARIAL = b"".join(
    [
        b'{"type":"log","level":"info","message":"hello"}\n',
        b'{"type":"step","id":"a","name":"files/read","status":"running","args":{"p":1}}\r\n',
        b"not json\n",
        b"\n",
        b"   \n",
        b'{"type":"nope"}\n',
        b'{"type":"step","id":"b","name":"x"}\n',  # no status
        b'{"type":"step","id":"b","name":"x","status":"running","ts":"5"}\n',
        b'{"type":"step","id":"b","name":"x","status":"running","ts":true}\n',
        b'{"type":"step","id":"b","name":"x","status":"running","ts":1.5}\n',
        b'{"type":"step","id":"b","name":"x","status":"done"}\n',
        b'{"type":"log","level":"verbose","message":"m"}\n',
        b'{"type":"log","level":"info","message":"caf\xc3"}\n',  # invalid UTF-8
        b'{"type":"step","id":"a","name":"other","status":"succeeded"}\n',  # renamed
        b'{"type":"step","id":"a","name":"files/read","status":"succeeded","result":[1],'
        b'"durationMs":12.5,"ts":3}\n',
        b'{"type":"step","id":"a","name":"files/read","status":"failed","error":"late"}\n',
        b'{"type":"step","id":"c","name":"z","status":"failed","error":"boom","extra":1}\n',
        b'{"type":"log","level":"warn","message":"' + b"x" * 300 + b'"}\n',  # too long
        b"[1,2]\n",
        b'{"type":"step","id":"d","name":"z","status":"running"}\n',
        b'{"type":"result","message":"d\xc3\xa9j\xc3\xa0 \\u00e9"}',  # no final newline
    ]
)
AFTER_TERMINAL = (
    b'{"type":"result","message":"first"}\n'
    b'{"type":"result","message":"second"}\n'
    b"bad\n"
    b'{"type":"step","id":"d","name":"z","status":"running"}'
)


@pytest.mark.parametrize("chunk_size", [1, 3, 64, 1 << 30])
def test_adversarial_lines(chunk_size: int) -> None:
    ref = _assert_all_agree(ADVERSARIAL, chunk_size, max_line_bytes=200)
    events = [event for _, event, _ in ref["frames"]]
    assert events == ["step", "step", "step", "step", "result", "done"]
    assert ref["steps"] == {"a": "succeeded", "c": "failed", "d": "running"}


@pytest.mark.parametrize("chunk_size", [1, 40])
def test_lines_after_the_terminal(chunk_size: int) -> None:
    ref = _assert_all_agree(AFTER_TERMINAL, chunk_size)
    assert [event for _, event, _ in ref["frames"]] == ["result", "done"]
    assert ref["frames"][0][2]["message"] == "first"
    assert ref["diagnostics"] == 3


def test_done_frame_does_not_depend_on_chunking() -> None:
    # The done frame follows the terminal at once: later lines are not counted in it.
    ref = _assert_all_agree(AFTER_TERMINAL, len(AFTER_TERMINAL))
    assert ref["frames"][-1][2] == {"terminal": "result", "diagnostics": 0}


@pytest.mark.parametrize("chunk_size", [4096, 1 << 30])
def test_deeply_nested_json_is_a_diagnostic(chunk_size: int) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    data = (
        b'{"type":"step","id":"e","name":"z","status":"running","args":' + deep + b"}\n"
        b'{"type":"result","message":"ok"}\n'
    )
    ref = _assert_all_agree(data, chunk_size)
    assert [event for _, event, _ in ref["frames"]] == ["result", "done"]
    assert ref["diagnostics"] == 1


def test_upstream_closed_is_synthesized() -> None:
    data = b'{"type":"step","id":"a","name":"n","status":"running"}\n{"type":"log"'
    ref = _assert_all_agree(data, 5)
    assert [event for _, event, _ in ref["frames"]] == ["step", "error", "done"]
    assert ref["frames"][1][2]["code"] == "upstream_closed"
    assert ref["diagnostics"] == 1


def test_oversized_line_memory_is_bounded() -> None:
    data = b'{"type":"log","message":"' + b"y" * 10_000 + b'"}\n{"type":"result","message":"ok"}\n'
    ref = _assert_all_agree(data, 100, max_line_bytes=1000)
    assert [event for _, event, _ in ref["frames"]] == ["result", "done"]
    assert ref["diagnostics"] == 1


@pytest.mark.parametrize("ceiling", [TypedDecodeCeiling, UntypedDecodeCeiling])
def test_ceilings_decode_every_line(ceiling: Callable[[], Any]) -> None:
    data = generate_trace(2000, seed=3)
    proc = ceiling()
    for chunk in chunked(data, 4096):
        assert proc.feed(chunk) == b""
    assert proc.close() == b""
    assert proc.rejected == 0


def test_generator_is_deterministic_and_realistic() -> None:
    data = generate_trace(5000, seed=11)
    assert data == generate_trace(5000, seed=11)
    assert data != generate_trace(5000, seed=12)
    stats = trace_stats(data)
    assert stats.lines == 5000
    assert stats.by_type["result"] == 1
    assert 0.12 < stats.share["log"] < 0.18
    assert stats.by_status["running"] == stats.by_status["succeeded"] + stats.by_status["failed"]
    assert stats.step_bytes_min >= 150 and stats.step_bytes_max <= 400
    assert stats.non_ascii_lines > 0
    ts = [json.loads(line)["ts"] for line in data.splitlines()]
    assert ts == sorted(ts)
    assert json.loads(data.splitlines()[-1])["type"] == "result"
