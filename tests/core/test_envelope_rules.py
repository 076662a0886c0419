"""Every envelope rule of DESIGN.md, one test each, through the façade."""

from __future__ import annotations

import json

import pytest

from sandstream.core import Error, Log, Result, Step, StreamProcessor, decode_payload, encode_line
from sandstream.core.envelope import LiveEnvelope
from tests.core.helpers import events, line, run, step

RESULT = line(type="result", message="done")


def test_a_valid_turn_folds_steps_and_ends_with_its_result() -> None:
    data = (
        step("s1", "running", args={"path": "a.txt"}, ts=10)
        + step("s1", "succeeded", result={"bytes": 3}, durationMs=5, ts=15)
        + RESULT
    )
    out, proc = run(data)
    (row,) = proc.turn.steps
    assert (row.id, row.name, row.status) == ("s1", "files/read", "succeeded")
    assert decode_payload(row.args) == {"path": "a.txt"}
    assert decode_payload(row.result) == {"bytes": 3}
    assert (row.duration_ms, row.first_ts, row.last_ts) == (5, 10, 15)
    assert proc.turn.result == Result(message="done")
    assert proc.diagnostics == []
    assert [e.event for e in events(out)] == ["step", "step", "result", "done"]


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (b"not json\n", "invalid_json"),
        (b'{"type":"log","level":"info","message":"a"\n', "invalid_json"),
        (b"[1,2]\n", "invalid_line"),
        (b'{"type":"thought","message":"x"}\n', "invalid_line"),
        (b'{"message":"no type"}\n', "invalid_line"),
        (b'{"type":"log","message":"no level"}\n', "invalid_line"),
        (b'{"type":"log","level":"loud","message":"x"}\n', "invalid_line"),
        (b'{"type":"step","id":"s","name":"n","status":"done"}\n', "invalid_line"),
        (b'{"type":"step","id":5,"name":"n","status":"running"}\n', "invalid_line"),
        (b'{"type":"result","message":"x","ts":"soon"}\n', "invalid_line"),
        (b'{"type":"result","message":"x","ts":1.5}\n', "invalid_line"),
        (b'{"type":"error","message":"no code"}\n', "invalid_line"),
        (b'{"type":"error","code":"","message":"empty code"}\n', "invalid_line"),
        (b'{"type":"step","id":"","name":"n","status":"running"}\n', "invalid_line"),
        (b'{"type":"step","id":"s","name":"","status":"running"}\n', "invalid_line"),
        (b'{"type":"log","level":"info","message":"x","ts":-1}\n', "invalid_line"),
        (b'{"type":"log","level":"info","message":"\xff"}\n', "invalid_utf8"),
        (
            b'{"type":"step","id":"s","name":"n","status":"running","args":{"k":"\xc3"}}\n',
            "invalid_utf8",
        ),
        (
            b'{"type":"step","id":"s","name":"n","status":"running","args":{"k":[1,]}}\n',
            "invalid_json",
        ),
        (b'{"type":"result","message":"x"} trailing\n', "invalid_json"),
        (b'{"type":"result","message":"x","type":"log"}\n', "invalid_line"),
        (
            b'{"type":"step","id":"s","name":"n","status":"running","args":'
            + b"[" * 5000
            + b"]" * 5000
            + b"}\n",
            "invalid_json",
        ),
    ],
)
def test_a_bad_line_is_rejected_with_its_line_number_and_never_forwarded(
    bad: bytes, code: str
) -> None:
    data = step("s0", "running") + bad + RESULT
    out, proc = run(data, "ndjson")
    assert out == step("s0", "running") + RESULT
    assert [(d.line, d.code) for d in proc.diagnostics] == [(2, code)]
    assert proc.turn.result is not None


def test_a_line_over_the_bound_is_dropped_and_reported() -> None:
    big = line(type="log", level="info", message="x" * 200)
    out, proc = run(step("s", "running") + big + RESULT, "ndjson", max_line_bytes=100)
    assert out == step("s", "running") + RESULT
    assert [(d.line, d.code) for d in proc.diagnostics] == [(2, "line_too_long")]


def test_a_terminal_status_without_running_creates_the_row() -> None:
    _, proc = run(step("s", "failed", error="boom") + RESULT)
    (row,) = proc.turn.steps
    assert (row.status, row.error) == ("failed", "boom")


def test_lines_after_a_steps_terminal_status_are_violations() -> None:
    data = (
        step("s", "running")
        + step("s", "succeeded")
        + step("s", "running")
        + step("s", "failed")
        + RESULT
    )
    out, proc = run(data, "ndjson")
    assert out == step("s", "running") + step("s", "succeeded") + RESULT
    assert [(d.line, d.code) for d in proc.diagnostics] == [
        (3, "step_already_ended"),
        (4, "step_already_ended"),
    ]
    assert proc.turn.step("s").status == "succeeded"  # type: ignore[union-attr]


def test_a_step_id_reused_under_another_name_is_a_violation() -> None:
    data = step("s", "running", name="a") + step("s", "succeeded", name="b") + RESULT
    _, proc = run(data)
    assert [d.code for d in proc.diagnostics] == ["step_renamed"]
    assert proc.turn.step("s").status == "running"  # type: ignore[union-attr]


def test_steps_keep_first_seen_order_and_update_in_place() -> None:
    data = (
        step("b", "running")
        + step("a", "running")
        + step("b", "succeeded")
        + step("c", "succeeded")
        + step("a", "failed", error="x")
        + RESULT
    )
    _, proc = run(data)
    assert [(r.id, r.status) for r in proc.turn.steps] == [
        ("b", "succeeded"),
        ("a", "failed"),
        ("c", "succeeded"),
    ]


def test_the_first_terminal_wins_and_later_lines_are_violations() -> None:
    data = (
        line(type="error", code="model_timeout", message="slow") + RESULT + step("late", "running")
    )
    out, proc = run(data, "ndjson")
    assert out == line(type="error", code="model_timeout", message="slow")
    assert proc.turn.error == Error(code="model_timeout", message="slow")
    assert [(d.line, d.code) for d in proc.diagnostics] == [
        (2, "after_terminal"),
        (3, "after_terminal"),
    ]
    assert proc.turn.steps == []


def test_upstream_ending_without_a_terminal_gets_upstream_closed() -> None:
    out, proc = run(step("s", "running"), "ndjson")
    assert out.splitlines()[-1] == encode_line(
        Error(code="upstream_closed", message="upstream ended without a result or error")
    ).rstrip(b"\n")
    assert proc.turn.synthesized
    assert proc.turn.error is not None and proc.turn.error.code == "upstream_closed"


def test_cancel_ends_with_cancelled_once_and_nothing_after() -> None:
    proc = StreamProcessor("ndjson")
    proc.feed(step("s", "running"))
    first = proc.cancel()
    assert json.loads(first)["code"] == "cancelled"
    assert proc.cancel() == b""
    assert proc.close() == b""
    assert proc.fail("shutdown", "late") == b""


def test_cancel_after_a_result_adds_no_terminal() -> None:
    proc = StreamProcessor()
    proc.feed(RESULT)
    assert proc.cancel() == b""
    assert proc.turn.result is not None


def test_fail_carries_the_callers_code() -> None:
    proc = StreamProcessor("ndjson")
    out = proc.fail("runtime_exceeded", "over 8h")
    assert json.loads(out) == {"type": "error", "code": "runtime_exceeded", "message": "over 8h"}


def test_feed_after_close_raises() -> None:
    from sandstream.core import ProcessorClosedError

    proc = StreamProcessor()
    proc.close()
    with pytest.raises(ProcessorClosedError):
        proc.feed(b"{}\n")


def test_strict_mode_ends_the_turn_at_the_first_violation() -> None:
    data = step("s", "running") + b"garbage\n" + RESULT
    out, proc = run(data, "ndjson", strict=True)
    lines = out.splitlines()
    assert lines[0] == step("s", "running").rstrip()
    error = json.loads(lines[1])
    assert error["code"] == "protocol_error"
    assert "line 2" in error["message"]
    assert len(lines) == 2
    assert proc.turn.result is None


def test_crlf_and_a_final_line_without_newline_are_accepted() -> None:
    data = step("s", "running").replace(b"\n", b"\r\n") + RESULT.rstrip(b"\n")
    _, proc = run(data)
    assert proc.diagnostics == []
    assert proc.turn.result == Result(message="done")


def test_blank_lines_are_skipped_but_counted() -> None:
    data = b"\n  \n" + b"garbage\n" + RESULT
    _, proc = run(data)
    assert [(d.line, d.code) for d in proc.diagnostics] == [(3, "invalid_json")]


def test_chat_mode_filters_logs_and_trace_mode_keeps_them() -> None:
    data = line(type="log", level="info", message="hi") + RESULT
    sse_out, _ = run(data, "sse")
    trace_out, proc = run(data, "trace")
    assert [e.event for e in events(sse_out)] == ["result", "done"]
    assert [e.event for e in events(trace_out)] == ["log", "result", "done"]
    assert proc.turn.logs == 1


def test_sse_frames_carry_monotonic_ids_and_the_lines_own_bytes() -> None:
    data = (
        b'{"type":"step","id":"s","status":"running","name":"n", '
        b'"args":{"u":"\\u2028\xe2\x80\xa8"}}\n' + RESULT
    )
    out, _ = run(data)
    parsed = events(out)
    assert [e.id for e in parsed] == ["1", "2", "3"]
    assert parsed[0].data.encode() == data.split(b"\n")[0]
    assert json.loads(parsed[2].data) == {"terminal": "result", "diagnostics": 0}


def test_a_cr_inside_a_line_never_breaks_the_sse_frame() -> None:
    data = b'{"type":"result",\r"message":"x"}\n'
    out, proc = run(data)
    result, _done = events(out)
    assert result.event == "result"
    assert json.loads(result.data) == {"type": "result", "message": "x"}
    assert proc.diagnostics == []


def test_start_and_ping_frames() -> None:
    proc = StreamProcessor()
    start = proc.start({"chatId": "c1"})
    out = start + proc.ping() + proc.feed(RESULT)
    parsed = events(out)
    assert [(e.event, e.id) for e in parsed] == [("start", "1"), ("result", "2"), ("done", "3")]
    assert json.loads(parsed[0].data) == {"chatId": "c1"}
    assert b"\n\n: ping\nid: 2\n" in out  # one comment line between two frames
    ndjson = StreamProcessor("ndjson")
    assert ndjson.start({"x": 1}) == b"" and ndjson.ping() == b""


def test_diagnostics_are_bounded_but_all_counted() -> None:
    data = b"bad\n" * 50 + RESULT
    _, proc = run(data, max_diagnostics=10)
    assert len(proc.diagnostics) == 10
    assert proc.turn.diagnostic_count == 50


def test_encoded_envelopes_round_trip_through_the_processor() -> None:
    lines: list[LiveEnvelope] = [
        Log(level="warn", message="careful", ts=1),
        Step(id="s", name="n", status="running", args={"a": [1, "é"]}),
        Step(id="s", name="n", status="succeeded", result=None, duration_ms=1.5),
        Result(message="ok"),
    ]
    data = b"".join(encode_line(e) for e in lines)
    out, proc = run(data, "ndjson")
    assert out == data
    assert proc.diagnostics == []


def test_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="mode"):
        StreamProcessor("xml")  # type: ignore[arg-type]


def test_close_carries_the_callers_message_and_flushes_a_final_line() -> None:
    proc = StreamProcessor("ndjson")
    out = proc.feed(step("s", "running").rstrip(b"\n"))
    assert out == b""
    out = proc.close("the container exited with status 3")
    first, last = out.splitlines()
    assert json.loads(first)["id"] == "s"
    assert json.loads(last)["message"] == "the container exited with status 3"
