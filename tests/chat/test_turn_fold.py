"""A turn's fold is the same message however its session's bytes come: cut anywhere,
fed as they come, or at once (:func:`fold_chunks`); lines after the terminal and a
session without one are folded as the chat stores them."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.core import DEFAULT_MAX_LINE_BYTES
from sandstream.server.chat import TurnFold, fold_chunks
from tests.core.helpers import line, step

LIMITS = {"max_steps": 5, "max_step_bytes": 4096, "max_line_bytes": DEFAULT_MAX_LINE_BYTES}


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
