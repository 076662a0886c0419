"""The ``usage`` envelope extension through the façade: its lines validated, summed in
``turn.usage`` and framed when the reader asks for it, rejected when it does not (or
when the caller meters the calls itself), and the caller's own lines via add_usage."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.core import (
    USAGE_EXTENSION,
    Mode,
    ModelUsage,
    StreamProcessor,
    Usage,
    encode_line,
)
from tests.core.helpers import events, line, run, step

USAGE = (USAGE_EXTENSION,)
RESULT = line(type="result", message="done")


def usage_line(**fields: Any) -> bytes:
    counts = {
        "protocol": "anthropic",
        "model": "claude-sonnet-4-5",
        "input_tokens": 25,
        "output_tokens": 387,
        "cached_input_tokens": 8204,
        "cache_write_tokens": 1510,
    }
    return line(type="usage", **{**counts, **fields})


TURN = (
    usage_line()
    + step("s1", "running", name="shell")
    + step("s1", "succeeded", name="shell")
    + usage_line(protocol="chat", model="gpt-5", input_tokens=93, output_tokens=46,
                 cached_input_tokens=1024, cache_write_tokens=0, complete=False)
    + RESULT
)  # fmt: skip
TOTAL = Usage(25 + 93, 387 + 46, 8204 + 1024, 1510)


def test_the_usage_lines_are_summed_and_forwarded() -> None:
    out, proc = run(TURN, extensions=USAGE)
    assert proc.diagnostics == []
    assert (proc.turn.usage, proc.turn.model_calls) == (TOTAL, 2)
    frames = events(out)
    assert [e.event for e in frames] == ["usage", "step", "step", "usage", "result", "done"]
    assert json.loads(frames[3].data)["complete"] is False


@pytest.mark.parametrize("mode", ["ndjson", "sse", "trace"])
def test_the_lines_pass_unchanged(mode: Mode) -> None:
    out, _ = run(TURN, mode, extensions=USAGE)
    if mode == "ndjson":
        assert out == TURN
    else:
        assert [e.data.encode() + b"\n" for e in events(out)][:5] == TURN.splitlines(True)


@pytest.mark.parametrize("strict", [False, True])
def test_without_the_extension_a_usage_line_is_an_unknown_type(strict: bool) -> None:
    out, proc = run(TURN, "ndjson", strict=strict)
    assert b'"type":"usage"' not in out
    assert proc.turn.usage == Usage() and proc.turn.model_calls == 0
    assert proc.diagnostics[0].code == "invalid_line"
    assert proc.diagnostics[0].line == 1
    assert "usage" in proc.diagnostics[0].reason
    if strict:
        assert proc.turn.error is not None and proc.turn.error.code == "protocol_error"
    else:
        assert proc.turn.result is not None


def test_the_live_extension_alone_does_not_accept_usage_lines() -> None:
    _, proc = run(TURN, extensions=("live",))
    assert [d.line for d in proc.diagnostics] == [1, 4]
    _, both = run(TURN + b"", extensions=("live", "usage"))
    assert both.diagnostics == [] and both.turn.usage == TOTAL


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"input_tokens": -1}, "$.input_tokens"),
        ({"output_tokens": 1.5}, "$.output_tokens"),
        ({"cached_input_tokens": "3"}, "$.cached_input_tokens"),
        ({"protocol": "bedrock"}, "$.protocol"),
        ({"model": 7}, "$.model"),
        ({"complete": "yes"}, "$.complete"),
        ({"ts": -3}, "$.ts"),
    ],
)
def test_a_malformed_usage_line_is_rejected_with_its_path(
    fields: dict[str, Any], path: str
) -> None:
    out, proc = run(usage_line(**fields) + RESULT, "ndjson", extensions=USAGE)
    assert out == RESULT
    (diagnostic,) = proc.diagnostics
    assert diagnostic.code == "invalid_line" and path in diagnostic.reason
    assert proc.turn.model_calls == 0


@pytest.mark.parametrize(
    "missing",
    ["protocol", "input_tokens", "output_tokens", "cached_input_tokens", "cache_write_tokens"],
)
def test_a_usage_line_needs_its_counts(missing: str) -> None:
    fields = json.loads(usage_line())
    del fields[missing]
    _, proc = run(line(**fields) + RESULT, extensions=USAGE)
    (diagnostic,) = proc.diagnostics
    assert diagnostic.code == "invalid_line" and f"`{missing}`" in diagnostic.reason


def test_a_usage_line_after_the_terminal_is_rejected() -> None:
    _, proc = run(RESULT + usage_line(), extensions=USAGE)
    assert [d.code for d in proc.diagnostics] == ["after_terminal"]
    assert proc.turn.model_calls == 0


@settings(max_examples=50)
@given(points=st.lists(st.integers(0, len(TURN)), max_size=10))
def test_every_chunking_gives_the_same_totals_and_output(points: list[int]) -> None:
    whole, reference = run(TURN, extensions=USAGE)
    proc = StreamProcessor(extensions=USAGE)
    bounds = [0, *sorted(points), len(TURN)]
    out = b"".join(proc.feed(TURN[a:b]) for a, b in pairwise(bounds))
    assert out + proc.close() == whole
    assert proc.turn.usage == reference.turn.usage == TOTAL


# -- the caller's own metering ---------------------------------------------------------

CALL = ModelUsage(
    protocol="gemini",
    input_tokens=195,
    output_tokens=500,
    cached_input_tokens=7995,
    cache_write_tokens=0,
    model="gemini-2.5-pro",
)


def test_a_caller_that_meters_rejects_upstream_usage_lines() -> None:
    proc = StreamProcessor("ndjson", extensions=USAGE, usage_from_upstream=False, strict=True)
    out = proc.feed(usage_line())
    assert b'"type":"usage"' not in out
    assert proc.turn.error is not None and proc.turn.error.code == "protocol_error"
    assert proc.turn.model_calls == 0


@pytest.mark.parametrize("mode", ["ndjson", "sse"])
def test_add_usage_frames_the_caller_s_line_in_the_turn_s_sequence(mode: Mode) -> None:
    proc = StreamProcessor(mode, extensions=USAGE, usage_from_upstream=False)
    out = proc.feed(step("s1", "running"))
    out += proc.add_usage(CALL)
    out += proc.feed(RESULT) + proc.close()
    assert proc.turn.usage == Usage(195, 500, 7995) and proc.turn.model_calls == 1
    if mode == "ndjson":
        assert out.splitlines(True)[1] == encode_line(CALL)
    else:
        frames = events(out)
        assert [(e.event, e.id) for e in frames][:3] == [
            ("step", "1"),
            ("usage", "2"),
            ("result", "3"),
        ]
        assert json.loads(frames[1].data) == json.loads(encode_line(CALL))


def test_add_usage_without_the_extension_or_after_the_end_counts_but_sends_nothing() -> None:
    proc = StreamProcessor("ndjson")
    assert proc.add_usage(CALL) == b""
    proc.feed(RESULT)
    proc.close()
    asked = StreamProcessor("ndjson", extensions=USAGE)
    asked.feed(RESULT)
    assert asked.add_usage(CALL) == b""
    asked.close()
    assert asked.add_usage(CALL) == b""
    assert proc.turn.usage == Usage(195, 500, 7995)
    assert asked.turn.usage == Usage(390, 1000, 2 * 7995) and asked.turn.model_calls == 2


def test_the_line_encodes_its_counts_and_omits_what_is_default() -> None:
    encoded = json.loads(encode_line(CALL))
    assert encoded == {
        "type": "usage",
        "protocol": "gemini",
        "model": "gemini-2.5-pro",
        "input_tokens": 195,
        "output_tokens": 500,
        "cached_input_tokens": 7995,
        "cache_write_tokens": 0,
    }
