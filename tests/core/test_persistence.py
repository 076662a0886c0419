"""Folding a turn into its persisted assistant message, and the replay window."""

from __future__ import annotations

import json

import msgspec

from sandstream.core import StreamProcessor
from sandstream.core.persistence import (
    ErrorBlock,
    PersistedFileAttachment,
    PersistedMessage,
    StepTraceBlock,
    TextBlock,
    ToolOutputBlock,
    assistant_message,
    replay_window,
    user_message,
)
from tests.core.helpers import line, step


def _turn(data: bytes, settle: str = "close") -> StreamProcessor:
    proc = StreamProcessor()
    proc.feed(data)
    proc.cancel() if settle == "cancel" else proc.close()
    return proc


def test_a_completed_turn_folds_into_text_steps_and_tool_output() -> None:
    proc = _turn(
        step("s1", "running", args={"path": "a"}, ts=1)
        + step("s1", "succeeded", result={"rows": [1, 2]}, durationMs=7, ts=8)
        + step("s2", "failed", name="run_shell", error="exit 2")
        + line(type="result", message="All done")
    )
    message = assistant_message(proc.turn, message_id="m1", created_at=100)
    assert message.status == "complete"
    text, trace, output = message.content
    assert text == TextBlock("All done")
    assert isinstance(trace, StepTraceBlock)
    assert [(s.id, s.status, s.error) for s in trace.steps] == [
        ("s1", "succeeded", None),
        ("s2", "failed", "exit 2"),
    ]
    assert isinstance(output, ToolOutputBlock)
    assert (output.step_id, output.truncated, output.size) == ("s1", False, len(b'{"rows":[1,2]}'))
    stored = msgspec.json.decode(msgspec.json.encode(message), type=PersistedMessage)
    assert stored.content[2] == ToolOutputBlock("s1", "files/read", {"rows": [1, 2]}, False, 14)
    stored_trace = stored.content[1]
    assert isinstance(stored_trace, StepTraceBlock)
    assert stored_trace.steps[0].args == {"path": "a"}


def test_results_over_the_display_bound_are_truncated_with_their_size() -> None:
    big = "é" * 5000  # 10 000 bytes of UTF-8, plus quotes
    proc = _turn(step("s", "succeeded", result=big) + line(type="result", message="ok"))
    message = assistant_message(proc.turn, message_id="m", created_at=1, display_bytes=1001)
    output = message.content[2]
    assert isinstance(output, ToolOutputBlock)
    assert output.truncated
    assert output.size == len(json.dumps(big, ensure_ascii=False).encode())
    assert isinstance(output.output, str)
    assert len(output.output.encode()) <= 1001  # cut at a character boundary
    json.dumps(msgspec.json.decode(msgspec.json.encode(message)))  # still valid JSON


def test_a_cancelled_turn_is_persisted_as_cancelled_with_its_steps_so_far() -> None:
    proc = _turn(step("s1", "running"), settle="cancel")
    message = assistant_message(proc.turn, message_id="m", created_at=1)
    assert message.status == "cancelled"
    trace, error = message.content
    assert isinstance(trace, StepTraceBlock)
    assert trace.steps[0].status == "cancelled"
    assert trace.steps[0].error == "the turn was cancelled: the turn was cancelled"
    assert isinstance(error, ErrorBlock) and error.code == "cancelled"


def test_every_step_still_running_in_an_ended_turn_is_closed() -> None:
    done = step("s0", "running") + step("s0", "succeeded", result=1)
    for settle, ending, status, reason in [
        ("close", b"", "failed", "[upstream_closed] upstream ended without a result or error"),
        ("close", line(type="error", code="x", message="m"), "failed", "[x] m"),
        ("close", line(type="result", message="ok"), "failed", ""),
    ]:
        proc = _turn(done + step("s1", "running") + step("s2", "running") + ending, settle)
        message = assistant_message(proc.turn, message_id="m", created_at=1)
        trace = next(b for b in message.content if isinstance(b, StepTraceBlock))
        assert [(s.id, s.status) for s in trace.steps] == [
            ("s0", "succeeded"),
            ("s1", status),
            ("s2", status),
        ]
        assert trace.steps[0].error is None
        expected = "the turn ended before this step finished" + (f": {reason}" if reason else "")
        assert trace.steps[1].error == trace.steps[2].error == expected


def test_a_turn_not_ended_yet_keeps_its_running_steps() -> None:
    proc = StreamProcessor()
    proc.feed(step("s1", "running"))
    message = assistant_message(proc.turn, message_id="m", created_at=1)
    trace = message.content[0]
    assert isinstance(trace, StepTraceBlock) and trace.steps[0].status == "running"


def test_an_error_turn_is_failed() -> None:
    proc = _turn(line(type="error", code="model_timeout", message="slow"))
    message = assistant_message(proc.turn, message_id="m", created_at=1)
    assert message.status == "failed"
    assert message.content == [ErrorBlock("model_timeout", "slow")]


def test_replay_window_sends_the_last_turns_oldest_first() -> None:
    messages = [user_message(f"u{i}", f"question {i}", created_at=i) for i in range(25)]
    window = replay_window(messages)
    assert [t.content for t in window] == [f"question {i}" for i in range(5, 25)]
    assert [t.ts for t in window] == list(range(5, 25))
    assert replay_window(messages, limit=0) == []


def test_replay_names_attachments_and_stands_errors_in_for_text() -> None:
    attachment = PersistedFileAttachment(id="f1", name="data.csv", size=10)
    user = user_message("u", "look", created_at=1, attachments=[attachment])
    failed = assistant_message(
        _turn(line(type="error", code="model_error", message="bad")).turn,
        message_id="a",
        created_at=2,
    )
    window = replay_window([user, failed])
    assert window[0].content == "look\n\n[attached: data.csv]"
    assert (window[1].role, window[1].content) == ("assistant", "[model_error] bad")
