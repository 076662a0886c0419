"""Tests for the Claude Code stream-json → envelope translator."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandstream.core.envelope import (
    Envelope,
    Error,
    Log,
    Result,
    Step,
    encode_line,
    new_wire_decoder,
)
from sandstream.core.splitter import SplitterClosedError
from sandstream.core.translators.claude_code import ClaudeCodeTranslator

DATA = Path(__file__).parent.parent / "data" / "claude_code"
TRANSCRIPTS = sorted(p.name for p in DATA.glob("*.jsonl"))
SID = "b4f7c2e0-5d1a-4c8e-9f3b-2a6d8e1c7f90"
INIT = Log(
    level="info",
    message=f"claude-code session {SID} started (model claude-sonnet-4-5-20250929, 8 tools)",
)


def transcript(name: str) -> bytes:
    return (DATA / name).read_bytes()


def translate(chunks: Sequence[bytes], **kwargs: int) -> list[Envelope]:
    translator = ClaudeCodeTranslator(**kwargs)
    out: list[Envelope] = []
    for chunk in chunks:
        out += translator.feed(chunk)
    out += translator.close()
    return out


def lines(*objs: Any) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"type": "assistant", "message": {"role": "assistant", "content": list(blocks)}}


def tool_use(id: str, name: str = "Bash", input: Any = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": input or {"command": "ls"}}


def user(*blocks: Any) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": list(blocks)}}


def tool_result(id: str, content: Any = "ok", is_error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error}


def result_line(subtype: str = "success", is_error: bool = False, **kw: Any) -> dict[str, Any]:
    return {"type": "result", "subtype": subtype, "is_error": is_error, **kw}


def warnings(envelopes: Sequence[Envelope]) -> list[str]:
    return [e.message for e in envelopes if isinstance(e, Log) and e.level == "warn"]


# --- Recorded transcripts -----------------------------------------------------------


def test_success_run_with_two_tool_calls() -> None:
    assert translate([transcript("success_two_tools.jsonl")]) == [
        INIT,
        Log(level="info", message="I'll look at the project layout first."),
        Step(
            id="toolu_01Bash",
            name="Bash",
            status="running",
            args={"command": "ls", "description": "List files in the work directory"},
        ),
        Step(id="toolu_01Bash", name="Bash", status="succeeded", result="README.md\nsrc"),
        Step(
            id="toolu_02Read", name="Read", status="running", args={"file_path": "/work/README.md"}
        ),
        Step(
            id="toolu_02Read",
            name="Read",
            status="succeeded",
            result="     1→# Demo\n     2→A small demo project.",
        ),
        Log(
            level="info",
            message="The project is a small demo with a README and a `src` directory.",
        ),
        Log(
            level="info",
            message="claude-code finished: subtype=success, num_turns=3, duration_ms=18342, "
            "total_cost_usd=0.0612",
        ),
        Result(message="The project is a small demo with a README and a `src` directory."),
    ]


def test_run_with_a_failing_tool() -> None:
    out = translate([transcript("tool_error.jsonl")])
    assert out[1:6] == [
        Step(
            id="toolu_03Read",
            name="Read",
            status="running",
            args={"file_path": "/work/missing.txt"},
        ),
        Step(
            id="toolu_03Read",
            name="Read",
            status="failed",
            error="<tool_use_error>File does not exist.</tool_use_error>",
        ),
        Log(level="info", message="That file does not exist; listing instead."),
        Step(id="toolu_04Bash", name="Bash", status="running", args={"command": "ls /work"}),
        Step(id="toolu_04Bash", name="Bash", status="succeeded", result="README.md"),
    ]
    assert out[-1] == Result(message="There is no missing.txt; the directory only holds README.md.")
    assert warnings(out) == []


def test_run_that_hits_max_turns() -> None:
    out = translate([transcript("error_max_turns.jsonl")])
    assert [type(e) for e in out] == [Log, Step, Step, Step, Step, Log, Error]
    assert out[4] == Step(id="toolu_06Read", name="Read", status="succeeded", result="print('a')")
    assert out[-1] == Error(
        code="max_turns", message="Claude Code reached its maximum number of turns (2)"
    )


def test_noisy_run_warns_and_goes_on() -> None:
    translator = ClaudeCodeTranslator()
    out = translator.feed(transcript("noise.jsonl")) + translator.close()
    summary = "claude-code finished: subtype=success, num_turns=2, duration_ms=18342, "
    summary += "total_cost_usd=0.0612"
    expected: list[tuple[str, ...] | Envelope] = [
        ("warn", "claude-code line 1: not JSON ", "Welcome to Claude Code!"),
        INIT,  # line 2, CRLF-terminated
        ("warn", "claude-code line 4: not a JSON object: [1,2,3]"),
        ("warn", "claude-code line 5: not JSON ", '{"type":"assistant"'),
        ("warn", "claude-code line 6: not JSON ", "\ufffd"),
        ("warn", "claude-code line 8: unrecognized line type 'rate_limit_event': "),
        ("warn", "claude-code line 9: unrecognized line type None: "),
        Step(id="toolu_07Bash", name="Bash", status="running", args={"command": "date"}),
        ("warn", "claude-code line 11: tool_result for unknown tool_use 'toolu_99Ghost'"),
        Step(id="toolu_99Ghost", name="unknown", status="succeeded", result="orphan output"),
        Step(
            id="toolu_07Bash",
            name="Bash",
            status="succeeded",
            result="Thu Jan  1 00:00:00 UTC 1970",
        ),
        ("warn", "claude-code line 13: second tool_result for 'toolu_07Bash' dropped"),
        ("warn", "claude-code line 15: assistant line without content: "),
        Log(level="info", message=summary),
        Result(message="It is 1970."),
    ]
    assert len(out) == len(expected)
    for got, want in zip(out, expected, strict=True):
        if isinstance(want, tuple):
            assert isinstance(got, Log)
            assert got.level == want[0]
            assert got.message.startswith(want[1])
            assert all(part in got.message for part in want[2:])
        else:
            assert got == want
    assert translator.finished
    assert translator.lines_after_result == 1  # the stray text at the very end
    assert translator.session_id == SID


# --- Properties of every transcript -------------------------------------------------


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_transcripts_translate_to_valid_envelopes_with_one_terminal_last(name: str) -> None:
    out = translate([transcript(name)])
    decoder = new_wire_decoder()
    for envelope in out:
        assert type(decoder.decode(encode_line(envelope))) is type(envelope)
    terminals = [e for e in out if isinstance(e, Result | Error)]
    assert len(terminals) == 1
    assert out[-1] is terminals[0]


def test_all_four_transcripts_are_present() -> None:
    assert TRANSCRIPTS == [
        "error_max_turns.jsonl",
        "noise.jsonl",
        "success_two_tools.jsonl",
        "tool_error.jsonl",
    ]


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(TRANSCRIPTS),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=30),
)
def test_any_chunking_gives_identical_envelopes(name: str, cuts: list[int]) -> None:
    data = transcript(name)
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]
    assert translate(chunks) == translate([data])


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_one_byte_at_a_time_gives_identical_envelopes(name: str) -> None:
    data = transcript(name)
    assert translate([data[i : i + 1] for i in range(len(data))]) == translate([data])


# --- Timing -------------------------------------------------------------------------


def test_timestamps_and_durations_come_from_now_ms() -> None:
    translator = ClaudeCodeTranslator()
    data = transcript("success_two_tools.jsonl").splitlines(keepends=True)
    out: list[Envelope] = []
    for i, line in enumerate(data):
        out += translator.feed(line, now_ms=1_000 + 250 * i)
    steps = [e for e in out if isinstance(e, Step)]
    assert [(s.status, s.ts, s.duration_ms) for s in steps] == [
        ("running", 1_500, None),
        ("succeeded", 1_750, 250),
        ("running", 2_000, None),
        ("succeeded", 2_250, 250),
    ]
    assert all(e.ts is not None for e in out)


def test_duration_needs_both_timestamps_and_never_goes_negative() -> None:
    translator = ClaudeCodeTranslator()
    translator.feed(lines(assistant(tool_use("a"), tool_use("b"))), now_ms=None)
    translator.feed(lines(assistant(tool_use("c"))), now_ms=5_000)
    (a,) = translator.feed(lines(user(tool_result("a"))), now_ms=6_000)
    (c,) = translator.feed(lines(user(tool_result("c"))), now_ms=4_000)  # clock stepped back
    (b,) = translator.feed(lines(user(tool_result("b"))))
    assert isinstance(a, Step) and isinstance(b, Step) and isinstance(c, Step)
    assert (a.duration_ms, a.ts) == (None, 6_000)
    assert (c.duration_ms, c.ts) == (0, 4_000)
    assert (b.duration_ms, b.ts) == (None, None)


# --- Tool results -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("plain", "plain"),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "a\nb"),
        ([], ""),
        (
            [{"type": "text", "text": "a"}, {"type": "image", "source": {"data": "AA=="}}],
            [{"type": "text", "text": "a"}, {"type": "image", "source": {"data": "AA=="}}],
        ),
        ({"odd": True}, {"odd": True}),
        (None, None),
    ],
)
def test_tool_result_content_becomes_the_step_result(content: Any, expected: Any) -> None:
    out = translate([lines(assistant(tool_use("t")), user(tool_result("t", content)))])
    assert out[-1] == Step(id="t", name="Bash", status="succeeded", result=expected)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("Exit code 1\nboom", "Exit code 1\nboom"),
        ([{"type": "text", "text": "denied"}], "denied"),
        (None, "tool failed"),
        ("", "tool failed"),
        ([{"type": "image"}], '[{"type":"image"}]'),
    ],
)
def test_failed_tool_result_carries_the_error_text(content: Any, error: str) -> None:
    out = translate([lines(assistant(tool_use("t")), user(tool_result("t", content, True)))])
    assert out[-1] == Step(id="t", name="Bash", status="failed", error=error)


def test_is_error_must_be_true_to_fail() -> None:
    block = {"type": "tool_result", "tool_use_id": "t", "content": "x", "is_error": "yes"}
    out = translate([lines(assistant(tool_use("t")), user(block))])
    assert isinstance(out[-1], Step) and out[-1].status == "succeeded"


def test_tool_result_for_unknown_id_is_a_terminal_step_named_unknown() -> None:
    out = translate([lines(user(tool_result("ghost", "x", is_error=True)))])
    assert warnings(out) == ["claude-code line 1: tool_result for unknown tool_use 'ghost'"]
    assert out[-1] == Step(id="ghost", name="unknown", status="failed", error="x")


def test_duplicate_tool_use_and_second_result_are_dropped() -> None:
    out = translate(
        [
            lines(
                assistant(tool_use("t")),
                assistant(tool_use("t", name="Other")),
                user(tool_result("t")),
                user(tool_result("t")),
                assistant(tool_use("t")),
            )
        ]
    )
    assert [e for e in out if isinstance(e, Step)] == [
        Step(id="t", name="Bash", status="running", args={"command": "ls"}),
        Step(id="t", name="Bash", status="succeeded", result="ok"),
    ]
    assert warnings(out) == [
        "claude-code line 2: duplicate tool_use 't' dropped",
        "claude-code line 4: second tool_result for 't' dropped",
        "claude-code line 5: duplicate tool_use 't' dropped",
    ]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "tool_use", "name": "Bash", "input": {}},
        {"type": "tool_use", "id": "", "name": "Bash"},
        {"type": "tool_use", "id": 7, "name": "Bash"},
        {"type": "tool_use", "id": "t", "name": None},
    ],
)
def test_tool_use_without_id_or_name_is_a_warning(block: dict[str, Any]) -> None:
    out = translate([lines(assistant(block))])
    assert len(out) == 1
    assert warnings(out)[0].startswith("claude-code line 1: tool_use without a string id")


def test_tool_use_without_input_has_no_args() -> None:
    out = translate([lines(assistant({"type": "tool_use", "id": "t", "name": "Bash"}))])
    assert out == [Step(id="t", name="Bash", status="running")]


def test_tool_result_without_id_is_a_warning() -> None:
    out = translate([lines(user({"type": "tool_result", "content": "x"}))])
    assert warnings(out) == ["claude-code line 1: tool_result without a string tool_use_id: None"]


def test_subagent_tool_calls_are_steps_too() -> None:
    line = assistant(tool_use("sub", name="Grep"))
    line["parent_tool_use_id"] = "toolu_task"
    assert translate([lines(line)]) == [
        Step(id="sub", name="Grep", status="running", args={"command": "ls"})
    ]


def test_tracked_ids_are_bounded_and_the_oldest_forgotten() -> None:
    translator = ClaudeCodeTranslator(max_tracked_steps=2)
    translator.feed(lines(assistant(tool_use("a"), tool_use("b"), tool_use("c"))))
    assert translator.running_step_ids == ["b", "c"]
    out = translator.feed(lines(user(tool_result("a"))))
    assert out[-1] == Step(id="a", name="unknown", status="succeeded", result="ok")


# --- Text, system and ignored lines -------------------------------------------------


def test_text_and_thinking_blocks() -> None:
    line = assistant(
        {"type": "thinking", "thinking": "hmm"},
        {"type": "text", "text": "first"},
        {"type": "text", "text": "  "},
        {"type": "redacted_thinking", "data": "x"},
        "not a block",
        {"type": "text", "text": "second"},
    )
    assert translate([lines(line)]) == [
        Log(level="info", message="first"),
        Log(level="info", message="second"),
    ]


def test_other_system_lines_are_debug_logs() -> None:
    out = translate([lines({"type": "system", "subtype": "compact_boundary"})])
    assert out == [Log(level="debug", message="claude-code system: compact_boundary")]


def test_init_without_fields_still_logs() -> None:
    translator = ClaudeCodeTranslator()
    out = translator.feed(lines({"type": "system", "subtype": "init"}))
    assert out == [
        Log(level="info", message="claude-code session None started (model None, 0 tools)")
    ]
    assert translator.session_id is None


def test_stream_events_blank_lines_and_echoed_prompts_produce_nothing() -> None:
    data = lines(
        {"type": "stream_event", "event": {"type": "message_start"}},
        {"type": "user", "message": {"role": "user", "content": "the prompt"}},
        user({"type": "text", "text": "a user text block"}),
    )
    assert translate([data + b"\n  \n\r\n"]) == []


def test_user_line_without_message_is_a_warning() -> None:
    out = translate([lines({"type": "user"})])
    assert warnings(out) == ['claude-code line 1: user line without content: {"type": "user"}']


# --- The result line ----------------------------------------------------------------


def terminal(obj: dict[str, Any]) -> Envelope:
    out = translate([lines(obj)])
    assert len(out) == 2 and isinstance(out[0], Log)
    return out[1]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (result_line(result="done"), Result(message="done")),
        (result_line(), Result(message="")),
        (
            result_line("success", True, result="Claude AI usage limit reached|1755806400"),
            Error(code="agent_error", message="Claude AI usage limit reached|1755806400"),
        ),
        (
            result_line("error_during_execution", True, errors=["API Error: 500", "", 3]),
            Error(code="agent_error", message="API Error: 500"),
        ),
        (
            result_line("error_during_execution", True, result="internal API error"),
            Error(code="agent_error", message="internal API error"),
        ),
        (
            result_line("error_max_turns", True, num_turns=41),
            Error(code="max_turns", message="Claude Code reached its maximum number of turns (41)"),
        ),
        (
            result_line("error_max_turns", True),
            Error(code="max_turns", message="Claude Code reached its maximum number of turns"),
        ),
        (
            result_line("error_max_budget_usd", True),
            Error(code="max_budget", message="Claude Code run failed (error_max_budget_usd)"),
        ),
        (
            result_line("something_new", False, result=" "),
            Error(code="agent_error", message="Claude Code run failed (something_new)"),
        ),
        (
            {"type": "result", "subtype": ["x"], "is_error": True},
            Error(code="agent_error", message="Claude Code run failed (['x'])"),
        ),
        (
            {"type": "result", "is_error": False, "result": "no subtype"},
            Error(code="agent_error", message="no subtype"),
        ),
    ],
)
def test_result_line_maps_to_one_terminal(obj: dict[str, Any], expected: Envelope) -> None:
    assert terminal(obj) == expected


def test_result_summary_lists_only_numeric_fields() -> None:
    obj = result_line(result="x", num_turns=True, duration_ms=12, total_cost_usd="free")
    out = translate([lines(obj)])
    assert out[0] == Log(
        level="info", message="claude-code finished: subtype=success, duration_ms=12"
    )


def test_lines_after_the_result_are_dropped_and_counted() -> None:
    translator = ClaudeCodeTranslator()
    out = translator.feed(lines(result_line(result="a"), result_line(result="b")) + b"junk\n")
    assert [type(e) for e in out] == [Log, Result]
    assert translator.finished
    assert translator.lines_after_result == 2


def test_close_without_result_synthesizes_nothing() -> None:
    translator = ClaudeCodeTranslator()
    out = translator.feed(lines(assistant(tool_use("t"))))
    assert translator.close(now_ms=9) == []
    assert [type(e) for e in out] == [Step]
    assert not translator.finished
    assert translator.running_step_ids == ["t"]


def test_close_translates_a_final_line_without_newline() -> None:
    translator = ClaudeCodeTranslator()
    data = lines(result_line(result="last")).rstrip(b"\n")
    assert translator.feed(data) == []
    assert translator.close(now_ms=7)[-1] == Result(message="last", ts=7)
    assert translator.close() == []


def test_feed_after_close_raises() -> None:
    translator = ClaudeCodeTranslator()
    translator.close()
    with pytest.raises(SplitterClosedError):
        translator.feed(b"{}\n")


# --- Garbage and bounds -------------------------------------------------------------


def test_oversize_line_is_a_warning_and_the_stream_goes_on() -> None:
    big = lines(assistant({"type": "text", "text": "x" * 500}))
    out = translate([big + lines(result_line(result="ok"))], max_line_bytes=200)
    assert warnings(out) == ["claude-code line 1: line longer than 200 bytes, skipped"]
    assert out[-1] == Result(message="ok")


def test_excerpts_are_bounded() -> None:
    out = translate([b"x" * 100_000 + b"\n" + "é".encode() * 50_000 + b"\n"])
    assert len(out) == 2
    for message in warnings(out):
        assert len(message) < 400
        assert message.endswith("…")


def test_deeply_nested_json_is_a_warning() -> None:
    out = translate([b"[" * 100_000 + b"]" * 100_000 + b"\n"])
    assert len(out) == 1
    assert warnings(out)[0].startswith("claude-code line 1: ")


@pytest.mark.parametrize("kwargs", [{"excerpt_chars": 0}, {"max_tracked_steps": 0}])
def test_bounds_must_be_positive(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ClaudeCodeTranslator(**kwargs)


def check_output(out: Sequence[Envelope]) -> None:
    """Every envelope is valid on the wire; at most one terminal, and it is last."""
    decoder = new_wire_decoder()
    for envelope in out:
        decoder.decode(encode_line(envelope))
    terminals = [i for i, e in enumerate(out) if isinstance(e, Result | Error)]
    assert terminals in ([], [len(out) - 1])


@settings(max_examples=300)
@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=10))
def test_random_bytes_never_raise(data: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]
    out = translate(chunks, max_line_bytes=128)
    check_output(out)


_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
    st.sampled_from(["text", "tool_use", "tool_result", "init", "success", "error_max_turns"]),
)
_keys = st.sampled_from(
    [
        "type",
        "subtype",
        "message",
        "content",
        "id",
        "name",
        "input",
        "text",
        "tool_use_id",
        "is_error",
        "result",
        "errors",
        "num_turns",
        "session_id",
        "tools",
        "model",
    ]
)
_json = st.recursive(
    _json_leaf,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(_keys | st.text(max_size=5), children, max_size=5)
    ),
    max_leaves=25,
)
_lines = st.fixed_dictionaries(
    {"type": st.sampled_from(["system", "assistant", "user", "result", "stream_event", "x"])},
    optional={
        "subtype": _json,
        "message": st.fixed_dictionaries({}, optional={"content": _json, "role": _json}),
        "result": _json,
        "is_error": _json,
        "errors": _json,
        "num_turns": _json,
        "session_id": _json,
    },
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(objs=st.lists(st.one_of(_lines, _json), max_size=8), now=st.none() | st.integers(0, 10**13))
def test_json_of_any_shape_never_raises(objs: list[Any], now: int | None) -> None:
    translator = ClaudeCodeTranslator()
    data = b"".join(msgspec.json.encode(o) + b"\n" for o in objs)
    out = translator.feed(data, now_ms=now) + translator.close(now_ms=now)
    check_output(out)
    assert all(e.ts == now for e in out)
