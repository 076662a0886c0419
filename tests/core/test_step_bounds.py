"""A turn keeps a bounded number of steps and bytes; the rest is forwarded and counted."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core import StreamProcessor
from sandstream.core.persistence import StepsOmittedBlock, StepTraceBlock, assistant_message
from tests.core.helpers import line, step


def _pairs(count: int, payload: str = "x") -> list[bytes]:
    lines: list[bytes] = []
    for n in range(count):
        lines.append(step(f"s{n}", "running", args={"n": n}))
        lines.append(step(f"s{n}", "succeeded", result=payload))
    return lines


def test_steps_beyond_max_steps_are_forwarded_counted_and_not_kept() -> None:
    lines = _pairs(10)
    proc = StreamProcessor("ndjson", max_steps=3)
    out = proc.feed(b"".join(lines) + line(type="result", message="ok"))
    # The live stream carries every line the core validated, kept or not.
    assert out.count(b'"type":"step"') == 20
    turn = proc.turn
    assert [row.id for row in turn.steps] == ["s0", "s1", "s2"]
    assert turn.omitted_steps == 7
    assert turn.omitted_bytes == sum(len(raw) - 1 for raw in lines[6:])  # without "\n"
    message = assistant_message(turn, message_id="m", created_at=1)
    [trace] = [b for b in message.content if isinstance(b, StepTraceBlock)]
    assert len(trace.steps) == 3
    [omitted] = [b for b in message.content if isinstance(b, StepsOmittedBlock)]
    assert (omitted.steps, omitted.bytes) == (7, turn.omitted_bytes)
    assert omitted.message == f"7 more steps omitted ({turn.omitted_bytes} bytes)"
    stored = msgspec.json.decode(msgspec.json.encode(message))
    assert stored["content"][-1] == {
        "type": "steps_omitted",
        "steps": 7,
        "bytes": turn.omitted_bytes,
        "message": omitted.message,
    }
    assert message.status == "complete"


def test_the_byte_bound_keeps_rows_small_and_counts_what_it_drops() -> None:
    big = "y" * 5000
    proc = StreamProcessor("ndjson", max_step_bytes=8000)
    first_running = step("a", "running", args={"q": 1})
    proc.feed(first_running)
    # The result of "a" fits; "b" starts within the bound but its result does not fit.
    proc.feed(step("a", "succeeded", result=big))
    proc.feed(step("b", "running"))
    done_b = step("b", "failed", result=big, error="e" * 1000)
    proc.feed(done_b)
    proc.feed(step("c", "succeeded", result=big))  # a new step past the bound: omitted
    proc.close()
    turn = proc.turn
    a, b = turn.steps
    assert a.status == "succeeded" and a.result is not None
    assert b.status == "failed" and b.result is None
    assert b.error == "e" * 200  # the start of the error, not all of it
    assert b.omitted_bytes == len(done_b) - 1
    assert turn.step_bytes <= 8000
    assert turn.omitted_steps == 1
    message = assistant_message(turn, message_id="m", created_at=1)
    [trace] = [blk for blk in message.content if isinstance(blk, StepTraceBlock)]
    assert trace.steps[1].omitted_bytes == len(done_b) - 1


def test_an_unbounded_turn_keeps_no_counter() -> None:
    proc = StreamProcessor("ndjson")
    proc.feed(b"".join(_pairs(50)))
    proc.close()
    assert len(proc.turn.steps) == 50 and proc.turn.omitted_steps == 0
    message = assistant_message(proc.turn, message_id="m", created_at=1)
    assert not any(isinstance(b, StepsOmittedBlock) for b in message.content)


_step_streams = st.lists(
    st.tuples(st.integers(0, 30), st.integers(0, 300)), min_size=1, max_size=60
).map(
    # Well-formed steps in any interleaving: each id runs, then succeeds, once.
    lambda spec: [
        step(f"s{i}", status, result="z" * size if status == "succeeded" else None)
        for i, size in dict(spec).items()
        for status in ("running", "succeeded")
    ]
)


@given(
    lines=_step_streams,
    max_steps=st.integers(0, 10),
    max_bytes=st.integers(0, 3000),
    cut=st.lists(st.integers(1, 40), max_size=20),
)
def test_bounds_hold_and_every_step_is_either_kept_or_counted(
    lines: list[bytes], max_steps: int, max_bytes: int, cut: list[int]
) -> None:
    data = b"".join(lines)
    proc = StreamProcessor("ndjson", max_steps=max_steps, max_step_bytes=max_bytes)
    out = b""
    at = 0
    for size in cut:  # any chunking gives the same turn
        out += proc.feed(data[at : at + size])
        at += size
    out += proc.feed(data[at:]) + proc.close()
    turn = proc.turn
    distinct = len(lines) // 2
    assert len(turn.steps) <= max_steps
    assert turn.step_bytes <= max_bytes
    assert len(turn.steps) + turn.omitted_steps == distinct
    kept = {row.id for row in turn.steps}
    omitted_lines = [raw for raw in lines if msgspec.json.decode(raw)["id"] not in kept]
    assert turn.omitted_bytes == sum(len(raw) - 1 for raw in omitted_lines)
    assert out.count(b'"type":"step"') == len(lines)  # nothing dropped from the stream
