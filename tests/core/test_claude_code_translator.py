"""Tests for the Claude Code stream-json → envelope translator."""

from __future__ import annotations

import base64
import itertools
import json
import re
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
from sandstream.core.errors import SplitterClosedError
from sandstream.core.translators.claude_code import ClaudeCodeTranslator

DATA = Path(__file__).parent.parent / "data" / "claude_code"
TRANSCRIPTS = sorted(p.name for p in DATA.glob("*.jsonl"))
SID = "b4f7c2e0-5d1a-4c8e-9f3b-2a6d8e1c7f90"
INIT = Log(
    level="info",
    message=f"claude-code session {SID} started (model claude-sonnet-4-5-20250929, "
    "Claude Code 2.0.14, permission mode bypassPermissions, 8 tools)",
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
        ("debug", "claude-code rate limit: no details"),
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


def test_every_transcript_is_present_and_cited() -> None:
    assert TRANSCRIPTS == [
        "dots_interrupted_2.1.228.jsonl",
        "dots_permission_denied_2.1.228.jsonl",
        "error_max_turns.jsonl",
        "gleam_basic_query_2.1.7.jsonl",
        "noise.jsonl",
        "relay_authentication_failed.jsonl",
        "success_two_tools.jsonl",
        "tool_error.jsonl",
        "untether_autocompact_2.1.285.jsonl",
        "untether_rate_limit_warning_2.1.285.jsonl",
    ]
    readme = (DATA / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in TRANSCRIPTS)


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


# --- Recorded transcripts of current CLIs (see tests/data/claude_code/README.md) ------

DENIED_ID = "toolu_0147PnvrgYvQkbYPA9HjHzod"


def levels(envelopes: Sequence[Envelope], level: str) -> list[str]:
    return [e.message for e in envelopes if isinstance(e, Log) and e.level == level]


def test_permission_prompt_run_with_hooks_partial_messages_and_rate_limit() -> None:
    out = translate([transcript("dots_permission_denied_2.1.228.jsonl")])
    # Nothing is "unrecognized": partial messages vanish, the rest keeps its fields.
    assert levels(out, "debug") == [
        "claude-code system hook_started: hook_id=0d238734-0c02-4825-b6db-ddec8515940b, "
        "hook_name=SessionStart:startup, hook_event=SessionStart",
        "claude-code system hook_response: hook_id=0d238734-0c02-4825-b6db-ddec8515940b, "
        "hook_name=SessionStart:startup, hook_event=SessionStart, "
        'output={"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":""}}\n, '
        'stdout={"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":""}}\n, '
        "exit_code=0, outcome=success",
        "claude-code system status: status=requesting",
        "claude-code system thinking_tokens: estimated_tokens=50, estimated_tokens_delta=50",
        "claude-code rate limit: status=allowed, resetsAt=1788428400, rateLimitType=five_hour, "
        "overageStatus=rejected, overageDisabledReason=org_level_disabled_until, "
        "isUsingOverage=false",
    ]
    assert levels(out, "warn") == [
        "claude-code asks permission (request a8f8ddef-85af-4455-99e8-5e4990fc17d6): "
        f"tool_name=Write, display_name=Write, description=a.txt, tool_use_id={DENIED_ID}; "
        "nothing here answers permission prompts",
        f"claude-code permission denials: Write ({DENIED_ID})",
    ]
    steps = [e for e in out if isinstance(e, Step)]
    assert [(s.id, s.status) for s in steps] == [(DENIED_ID, "running"), (DENIED_ID, "failed")]
    assert steps[1].error == "permission denied (permission-rule): denied by the spike driver"
    assert out[-1] == Result(
        message="Nothing durable was learned — the only event was a denied tool call from "
        "the spike harness, so there's nothing worth remembering."
    )


def test_interrupted_turn_keeps_the_internal_diagnostic_out_of_the_error() -> None:
    out = translate([transcript("dots_interrupted_2.1.228.jsonl")])
    rejected = [e for e in out if isinstance(e, Step) and e.status == "failed"]
    assert [s.error for s in rejected] == [
        "permission denied (user-rejected): The user doesn't want to proceed with this tool "
        "use. The tool use was rejected (eg. if it was a file edit, the new_string was NOT "
        "written to the file). STOP what you are doing and wait for the user to tell you how "
        "to proceed."
    ]
    assert levels(out, "debug") == [
        "claude-code control_cancel_request: request_id=9dc45437-01a3-4d31-b99e-9957760c4e01",
        'claude-code control_response: response={"subtype":"success",'
        '"request_id":"req_1_interrupt","response":{"still_queued":[]}}',
    ]
    summary = levels(out, "info")[-1]
    assert summary == (
        "claude-code finished: subtype=error_during_execution, terminal_reason=aborted_tools, "
        "num_turns=3, duration_ms=2508, total_cost_usd=0.27933899999999995, diagnostics: "
        "[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=tool_use"
    )
    assert out[-1] == Error(
        code="agent_error", message="Claude Code stopped before finishing (aborted_tools)"
    )


def test_auto_compaction_is_logged_with_its_details() -> None:
    out = translate([transcript("untether_autocompact_2.1.285.jsonl")])
    assert out[0] == Log(
        level="info",
        message="claude-code session 4cda4f2a-2a49-499b-af37-c6f4739bd0c7 started (model "
        "claude-haiku-4-5-20251001, Claude Code 2.1.285, permission mode bypassPermissions, "
        "29 tools)",
    )
    assert levels(out, "debug")[:2] == [
        "claude-code system status: status=compacting",
        "claude-code system status: compact_result=success",
    ]
    (boundary,) = [m for m in levels(out, "info") if "compact_boundary" in m]
    assert boundary.startswith(
        'claude-code system compact_boundary: compact_metadata={"trigger":"auto",'
        '"pre_tokens":79267,"post_tokens":15092,'
    )
    assert "logical_parent_uuid=969dfdc1-bbf4-4bf4-89c2-c6eb1df0442f" in boundary
    assert warnings(out) == []
    assert out[-1] == Result(message="901")


def test_rate_limit_warning_is_a_warn_log() -> None:
    out = translate([transcript("untether_rate_limit_warning_2.1.285.jsonl")])
    (warning,) = warnings(out)
    assert warning.startswith(
        "claude-code rate limit: status=allowed_warning, resetsAt=1791036000, "
        "rateLimitType=seven_day, utilization=0.77, isUsingOverage=false, "
        "surpassedThreshold=0.75, unifiedWindows="
    )
    assert [type(e) for e in out] == [Step, Log, Step, Log, Log, Result]


def test_authentication_failure_has_its_own_code_and_is_not_agent_text() -> None:
    out = translate([transcript("relay_authentication_failed.jsonl")])
    text = "Failed to authenticate. API Error: 401 API key is invalid."
    assert out == [
        Log(level="warn", message=f"claude-code API error authentication_failed: {text}"),
        Log(
            level="info",
            message="claude-code finished: subtype=success, num_turns=1, total_cost_usd=0",
        ),
        Error(code="authentication_failed", message=text),
    ]


def test_basic_query_of_an_older_cli() -> None:
    out = translate([transcript("gleam_basic_query_2.1.7.jsonl")])
    assert out[0] == Log(
        level="info",
        message="claude-code session 1d1e46f9-35c7-4834-b529-846d5bb82288 started (model "
        "claude-opus-4-5-20251101, Claude Code 2.1.7, permission mode acceptEdits, 7 tools)",
    )
    assert out[-1] == Result(message="4")


def test_a_tool_result_over_the_line_bound_keeps_its_outcome_and_is_cut() -> None:
    # The real rate-limit turn, its tool_result grown past a 4 KiB line bound.
    data = transcript("untether_rate_limit_warning_2.1.285.jsonl").splitlines(keepends=True)
    data[2] = data[2].replace(b"\\techo72", b"\\techo72" + b" padding" * 1000)
    out = translate([b"".join(data)], max_line_bytes=4096)
    steps = [e for e in out if isinstance(e, Step)]
    assert [s.status for s in steps] == ["running", "succeeded"]
    assert isinstance(steps[1].result, str)
    assert steps[1].result.startswith("1\techo72 padding padding")
    assert re.search(r"… \[truncated: \d+ more bytes\]$", steps[1].result)
    cut_warning = "claude-code line 3: line longer than 4096 bytes: "
    assert any(w.startswith(cut_warning) for w in warnings(out))
    assert isinstance(out[-1], Result)


@pytest.mark.slow
@pytest.mark.parametrize("is_error", [False, True])
def test_a_tool_result_of_several_mib_keeps_its_outcome(is_error: bool) -> None:
    # As the CLI writes it: is_error after the content, then tool_use_result repeating
    # the output; the line is 6 MiB, in 64 KiB chunks.
    output = "line of output é\n" * (3 * 1024 * 1024 // 18)
    result_block = tool_result("t1", content=output, is_error=is_error)
    tool_line = {**user(result_block), "tool_use_result": {"stdout": output, "stderr": ""}}
    data = lines(assistant(tool_use("t1")), tool_line, result_line(result="done"))
    assert len(data) > 6 * 1024 * 1024
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    out = translate(chunks)
    steps = [e for e in out if isinstance(e, Step)]
    assert [s.status for s in steps] == ["running", "failed" if is_error else "succeeded"]
    cut = steps[1].error if is_error else steps[1].result
    assert isinstance(cut, str)
    assert cut.startswith("line of output é\n")
    assert 64 * 1024 < len(cut) < 128 * 1024 + 64  # 128 KiB of JSON-escaped text kept
    assert re.search(r"… \[truncated: \d+ more bytes\]$", cut)
    assert out[-1] == Result(message="done")


# --- Findings on other shapes of current CLIs -----------------------------------------


def test_image_tool_result_base64_never_reaches_the_step() -> None:
    png = base64.b64encode(bytes(3000)).decode()
    content = [
        {"type": "text", "text": "Screenshot taken"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
    ]
    out = translate([lines(assistant(tool_use("t", "Read")), user(tool_result("t", content)))])
    step = out[-1]
    assert step == Step(
        id="t",
        name="Read",
        status="succeeded",
        result="Screenshot taken\n[image image/png, 3000 bytes, omitted]",
    )
    assert png[:100] not in encode_line(step).decode()
    failed = translate(
        [lines(assistant(tool_use("t", "Read")), user(tool_result("t", content, is_error=True)))]
    )[-1]
    assert isinstance(failed, Step) and png[:100] not in (failed.error or "")


def test_url_images_and_unknown_blocks_are_kept() -> None:
    url = {"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}}
    out = translate([lines(assistant(tool_use("t")), user(tool_result("t", [url])))])
    assert out[-1] == Step(id="t", name="Bash", status="succeeded", result=[url])


def test_denial_announced_by_a_system_line_marks_the_tool_result() -> None:
    # Without --permission-prompt-tool the CLI denies on its own and says so first.
    denied = {
        "type": "system",
        "subtype": "permission_denied",
        "tool_name": "Write",
        "tool_use_id": "t",
        "message": "Claude requested permissions to write to /x, but you haven't granted it yet.",
    }
    text = "Claude requested permissions to write to /x, but you haven't granted it yet."
    out = translate(
        [lines(assistant(tool_use("t", "Write")), denied, user(tool_result("t", text, True)))]
    )
    assert isinstance(out[1], Log)
    assert out[1].level == "warn" and "permission_denied: tool_name=Write" in out[1].message
    assert out[-1] == Step(
        id="t",
        name="Write",
        status="failed",
        error=f"permission denied (permission-denied): {text}",
    )


def test_a_denied_call_without_tool_result_fails_at_the_result_as_denied() -> None:
    result = result_line(
        result="done", permission_denials=[{"tool_name": "Bash", "tool_use_id": "t"}]
    )
    out = translate([lines(assistant(tool_use("t")), result)])
    assert out[-2] == Step(
        id="t",
        name="Bash",
        status="failed",
        error="permission denied: Claude Code ended the turn without a result for this tool call",
    )
    assert out[-1] == Result(message="done")


def test_a_failed_hook_is_a_warning_with_its_stderr() -> None:
    hook = {
        "type": "system",
        "subtype": "hook_response",
        "hook_name": "SessionStart:startup",
        "exit_code": 2,
        "outcome": "error",
        "stderr": "no such file",
    }
    assert translate([lines(hook)]) == [
        Log(
            level="warn",
            message="claude-code system hook_response: hook_name=SessionStart:startup, "
            "exit_code=2, outcome=error, stderr=no such file",
        )
    ]


def test_long_system_fields_are_cut() -> None:
    out = translate([lines({"type": "system", "subtype": "hook_response", "output": "x" * 5000})])
    (log,) = out
    assert isinstance(log, Log) and log.message.endswith("x" * 10 + "…")
    assert len(log.message) < 300


def test_mcp_servers_are_listed_and_failures_warned() -> None:
    init = {
        "type": "system",
        "subtype": "init",
        "session_id": "s",
        "mcp_servers": [
            {"name": "memory", "status": "connected"},
            {"name": "computer", "status": "failed"},
        ],
    }
    assert translate([lines(init)]) == [
        Log(
            level="info",
            message="claude-code session s started (MCP memory (connected), computer (failed))",
        ),
        Log(level="warn", message="claude-code MCP server computer is failed"),
    ]


@pytest.mark.parametrize(
    ("obj", "code"),
    [
        (result_line("success", True, result="x", api_error_status=401), "authentication_failed"),
        (result_line("success", True, result="x", api_error_status=429), "rate_limited"),
        (result_line("success", True, result="x", api_error_status=500), "agent_error"),
        (result_line("error_max_turns", True, api_error_status=401), "max_turns"),
    ],
)
def test_api_error_status_picks_the_code(obj: dict[str, Any], code: str) -> None:
    out = translate([lines(obj)])
    assert isinstance(out[-1], Error) and out[-1].code == code


def test_api_error_without_text_still_sets_the_code() -> None:
    line = {"type": "assistant", "message": {"content": []}, "error": "billing_error"}
    out = translate([lines(line, result_line("success", True))])
    assert out[-1] == Error(code="billing_error", message="Claude Code run failed (success)")


def test_only_internal_errors_fall_back_to_a_readable_message() -> None:
    obj = result_line(
        "error_during_execution",
        True,
        errors=["[ede_diagnostic] result_type=user", "Error: Request was aborted."],
    )
    out = translate([lines(obj)])
    assert out[-1] == Error(code="agent_error", message="Error: Request was aborted.")
    assert (
        isinstance(out[0], Log)
        and "diagnostics: [ede_diagnostic] result_type=user" in out[0].message
    )


def test_other_control_requests_are_debug_logs() -> None:
    line = {"type": "control_request", "request_id": "r", "request": {"subtype": "interrupt"}}
    assert translate([lines(line)]) == [
        Log(
            level="debug",
            message='claude-code control_request: request_id=r, request={"subtype":"interrupt"}',
        )
    ]


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
            "a\n[image of unknown type, 1 bytes, omitted]",
        ),
        (
            [{"type": "tool_reference", "tool_name": "x"}, {"type": "text", "text": "b"}],
            [{"type": "tool_reference", "tool_name": "x"}, "b"],
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
    out = ClaudeCodeTranslator().feed(
        lines(assistant({"type": "tool_use", "id": "t", "name": "Bash"}))
    )
    assert out == [Step(id="t", name="Bash", status="running")]


def test_tool_result_without_id_is_a_warning() -> None:
    out = translate([lines(user({"type": "tool_result", "content": "x"}))])
    assert warnings(out) == ["claude-code line 1: tool_result without a string tool_use_id: None"]


def test_subagent_tool_calls_are_steps_too() -> None:
    line = assistant(tool_use("sub", name="Grep"))
    line["parent_tool_use_id"] = "toolu_task"
    assert ClaudeCodeTranslator().feed(lines(line)) == [
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


def test_other_system_lines_keep_their_fields() -> None:
    out = translate(
        [
            lines(
                {"type": "system", "subtype": "status", "status": "compacting", "uuid": "u"},
                {"type": "system", "subtype": "something_new", "count": 3, "tags": ["a", "b"]},
                {"type": "system"},
            )
        ]
    )
    assert out == [
        Log(level="debug", message="claude-code system status: status=compacting"),
        Log(level="debug", message='claude-code system something_new: count=3, tags=["a","b"]'),
        Log(level="debug", message="claude-code system None"),
    ]


def test_init_without_fields_still_logs() -> None:
    translator = ClaudeCodeTranslator()
    out = translator.feed(lines({"type": "system", "subtype": "init"}))
    assert out == [Log(level="info", message="claude-code session None started")]
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


def test_close_without_result_fails_running_steps_and_synthesizes_no_terminal() -> None:
    translator = ClaudeCodeTranslator()
    out = translator.feed(lines(assistant(tool_use("t"))), now_ms=4)
    assert [type(e) for e in out] == [Step]
    assert translator.close(now_ms=9) == [
        Step(
            id="t",
            name="Bash",
            status="failed",
            error="Claude Code ended the turn without a result for this tool call",
            duration_ms=5,
            ts=9,
        )
    ]
    assert translator.close() == []
    assert not translator.finished
    assert translator.running_step_ids == []


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
    st.sampled_from(
        [
            "text",
            "tool_use",
            "tool_result",
            "init",
            "success",
            "error_max_turns",
            "image",
            "can_use_tool",
            "permission_denied",
            "hook_response",
            "[ede_diagnostic] x",
            "authentication_failed",
            "allowed",
            "QUJD",
        ]
    ),
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
        "non_execution_kind",
        "tool_name",
        "status",
        "source",
        "data",
        "media_type",
        "request",
        "subtype",
        "mcp_servers",
        "outcome",
        "exit_code",
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
    {
        "type": st.sampled_from(
            [
                "system",
                "assistant",
                "user",
                "result",
                "stream_event",
                "rate_limit_event",
                "control_request",
                "control_cancel_request",
                "x",
            ]
        )
    },
    optional={
        "subtype": _json,
        "message": st.fixed_dictionaries({}, optional={"content": _json, "role": _json}),
        "result": _json,
        "is_error": _json,
        "errors": _json,
        "num_turns": _json,
        "session_id": _json,
        "tool_result_meta": _json,
        "permission_denials": _json,
        "error": _json,
        "rate_limit_info": _json,
        "request": _json,
        "mcp_servers": _json,
        "terminal_reason": _json,
        "api_error_status": _json,
        "tool_use_id": _json,
    },
)


@pytest.mark.slow
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(objs=st.lists(st.one_of(_lines, _json), max_size=8), now=st.none() | st.integers(0, 10**13))
def test_json_of_any_shape_never_raises(objs: list[Any], now: int | None) -> None:
    translator = ClaudeCodeTranslator()
    data = b"".join(msgspec.json.encode(o) + b"\n" for o in objs)
    out = translator.feed(data, now_ms=now) + translator.close(now_ms=now)
    check_output(out)
    assert all(e.ts == now for e in out)
