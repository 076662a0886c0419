"""A turn's fold is the same message however its session's bytes come: cut anywhere,
fed as they come, or at once (:func:`fold_chunks`); lines after the terminal and a
session without one are folded as the chat stores them; and the fold of a runner's
core, shared, is the fold of what that core wrote."""

from __future__ import annotations

from typing import TypedDict

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.core import DEFAULT_MAX_LINE_BYTES, StreamProcessor
from sandstream.core.envelope import LIVE_EXTENSION
from sandstream.server.chat import TurnFold, fold_chunks
from tests.core.helpers import line, step


class Limits(TypedDict):
    max_steps: int
    max_step_bytes: int
    max_line_bytes: int


LIMITS: Limits = {"max_steps": 5, "max_step_bytes": 4096, "max_line_bytes": DEFAULT_MAX_LINE_BYTES}


def transcript(steps: int, with_result: bool) -> list[bytes]:
    lines = [line(type="log", level="info", message="starting")]
    for n in range(steps):
        lines.append(step(f"s{n}", "running"))
        lines.append(step(f"s{n}", "succeeded", result="x" * (n * 97 % 700)))
    if with_result:
        lines.append(line(type="result", message="done"))
        lines.append(line(type="log", level="info", message="after the end"))
    return lines


def fed(data: bytes, cuts: list[int]) -> bytes:
    fold = TurnFold(**LIMITS)
    at = 0
    for cut in sorted(set(cuts)):
        fold.feed(data[at:cut])
        at = cut
    fold.feed(data[at:])
    return msgspec.json.encode(fold.message(message_id="m", created_at=1))


@settings(max_examples=60, deadline=None)
@given(
    steps=st.integers(0, 9),
    with_result=st.booleans(),
    cuts=st.lists(st.floats(0, 1), max_size=8),
)
def test_any_cutting_of_the_bytes_folds_to_the_same_message(
    steps: int, with_result: bool, cuts: list[float]
) -> None:
    lines = transcript(steps, with_result)
    data = b"".join(lines)
    whole = msgspec.json.encode(fold_chunks(lines, message_id="m", created_at=1, **LIMITS))
    assert fed(data, [int(c * len(data)) for c in cuts]) == whole


def test_a_session_without_a_terminal_fails_and_steps_past_the_bound_are_counted() -> None:
    fold = TurnFold(**LIMITS)
    for chunk in transcript(9, with_result=False):
        fold.feed(chunk)
    assert not fold.ended and fold.lines == 19
    message = fold.message(message_id="m", created_at=1)
    assert message.status == "failed"
    text = msgspec.json.encode(message).decode()
    assert "upstream_closed" in text and "steps_omitted" in text


def test_lines_after_the_terminal_are_ignored() -> None:
    fold = TurnFold(**LIMITS)
    fold.feed(b"".join(transcript(2, with_result=True)))
    assert fold.ended
    fold.feed(line(type="error", code="late", message="ignored"))
    assert fold.message(message_id="m", created_at=1).status == "complete"


def shared_and_refolded(raw: bytes, cuts: list[int]) -> tuple[bytes, bytes]:
    """The message of a runner's core fed ``raw`` as cut (shared, as the log mover
    takes it in the runner's process), and of a new fold of that core's output."""
    runner = StreamProcessor(
        "ndjson",
        extensions=(LIVE_EXTENSION,),
        max_steps=LIMITS["max_steps"],
        max_step_bytes=LIMITS["max_step_bytes"],
    )
    output, at = [], 0
    for cut in [*sorted(set(cuts)), len(raw)]:
        output.append(runner.feed(raw[at:cut]))
        at = cut
    output.append(runner.close())
    shared = TurnFold(**LIMITS, shared=runner)
    assert shared.shared
    again = fold_chunks(output, message_id="m", created_at=1, **LIMITS)
    return (
        msgspec.json.encode(shared.message(message_id="m", created_at=1)),
        msgspec.json.encode(again),
    )


RAW_LINES = st.sampled_from(
    [
        line(type="log", level="info", message="hi"),
        b'{ "type": "step", "id": "a", "status": "running", "name": "files/read" }\r\n',
        step("a", "succeeded", result="x" * 300),
        step("a", "running", name="renamed"),  # refused: its name changed
        step("b", "running"),
        step("b", "failed", error="no"),
        *(step(f"c{n}", "running") for n in range(6)),  # past the bound of 5 steps
        line(type="delta", target="text", text="Hel"),
        line(type="delta", target="text", text="lo"),
        b"not json\n",
        b"\n",
        line(type="result", message="done"),
        line(type="error", code="boom", message="it broke"),
    ]
)


@settings(max_examples=80, deadline=None)
@given(raw=st.lists(RAW_LINES, max_size=14), cuts=st.lists(st.floats(0, 1), max_size=6))
def test_a_runners_shared_fold_is_the_fold_of_its_output(
    raw: list[bytes], cuts: list[float]
) -> None:
    data = b"".join(raw)
    shared, again = shared_and_refolded(data, [int(c * len(data)) for c in cuts])
    assert shared == again
