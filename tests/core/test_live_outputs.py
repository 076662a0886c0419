"""What the ``live`` extension's lines become downstream: the stored assistant message
(no delta stored one by one) and the AI SDK UI message stream's chunks."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core import StreamProcessor, UIMessageStream, UIMessageStreamError
from sandstream.core.persistence import (
    ReasoningBlock,
    TextBlock,
    assistant_message,
)
from tests.core.helpers import line, step
from tests.core.test_live import OPTIONS, delta, pending, resolved
from tests.core.test_ui_message_stream import ALLOWED_KEYS, chunks

LIVE = ("live",)
RUN = step("s1", "running", name="shell", args={"cmd": "ls"})
DONE = step("s1", "succeeded", name="shell", result="a.txt")

# The keys ai 5.0.0's strict uiMessageChunkSchema allows for the chunks only live turns send.
ALLOWED_LIVE_KEYS = ALLOWED_KEYS | {
    "reasoning-start": {"type", "id", "providerMetadata"},
    "reasoning-delta": {"type", "id", "delta", "providerMetadata"},
    "reasoning-end": {"type", "id", "providerMetadata"},
    "data-permission": {"type", "id", "data", "transient"},
}


def live_sse(*lines: bytes, end: str = "close") -> tuple[bytes, StreamProcessor]:
    proc = StreamProcessor("sse", extensions=LIVE)
    out = proc.start({"chatId": "c1"}) + proc.ping()
    for one in lines:
        out += proc.feed(one)
    if end == "close":
        out += proc.close()
    elif end == "cancel":
        out += proc.cancel("stopped")
    return out, proc


def translate(sse: bytes, ai_version: int = 5) -> list[Any]:
    stream = UIMessageStream("m1", ai_version=ai_version)
    return chunks(stream.feed(sse) + stream.close())


def stored(proc: StreamProcessor) -> list[Any]:
    message = assistant_message(proc.turn, message_id="m1", created_at=0)
    return msgspec.json.decode(msgspec.json.encode(message.content))  # type: ignore[no-any-return]


# -- the stored message ------------------------------------------------------------------


def test_the_stored_message_holds_the_result_the_reasoning_once_and_the_requests() -> None:
    _, proc = live_sse(
        delta("r", "think", "reasoning"),
        delta("r", "ing", "reasoning"),
        delta("t", "Hel"),
        RUN,
        pending("p1"),
        resolved("p1", "always"),
        DONE,
        delta("t", "lo"),
        line(type="result", message="Hello"),
    )
    content = assistant_message(proc.turn, message_id="m1", created_at=0).content
    assert content[0] == ReasoningBlock("thinking")
    assert content[1] == TextBlock("Hello")
    assert [type(b).__name__ for b in content] == [
        "ReasoningBlock",
        "TextBlock",
        "StepTraceBlock",
        "ToolOutputBlock",
        "PermissionBlock",
    ]
    assert msgspec.to_builtins(content[-1]) == {
        "type": "permission",
        "id": "p1",
        "status": "resolved",
        "options": OPTIONS,
        "step": "s1",
        "title": "Run ls",
        "reply": "always",
    }


def test_a_request_is_pending_while_the_turn_is_live_and_cancelled_once_it_ended() -> None:
    proc = StreamProcessor("sse", extensions=LIVE)
    proc.feed(RUN + pending("p1"))
    (block,) = [b for b in stored(proc) if b["type"] == "permission"]
    assert (block["status"], block.get("reply")) == ("pending", None)
    proc.cancel("stopped")
    (block,) = [b for b in stored(proc) if b["type"] == "permission"]
    assert (block["status"], block["reply"]) == ("resolved", "cancelled")


def test_a_turn_that_failed_keeps_the_text_it_streamed() -> None:
    _, proc = live_sse(delta("t", "Half an ans"), delta("t", "wer"), end="cancel")
    content = assistant_message(proc.turn, message_id="m1", created_at=0).content
    assert content[0] == TextBlock("Half an answer")
    assert assistant_message(proc.turn, message_id="m1", created_at=0).status == "cancelled"


def test_without_live_lines_the_stored_message_is_unchanged() -> None:
    lines = (RUN, DONE, line(type="result", message="ok"))
    _, live = live_sse(*lines)
    strict = StreamProcessor("sse")
    strict.feed(b"".join(lines))
    strict.close()
    assert stored(live) == stored(strict)
    assert [b["type"] for b in stored(live)] == ["text", "steps", "tool_output"]


# -- the UI message stream -----------------------------------------------------------


def test_deltas_become_parts_keyed_by_message_id_and_the_result_is_not_sent_again() -> None:
    sse, _ = live_sse(
        delta("m-a", "hmm", "reasoning"),
        delta("m-a", "Hel"),
        delta("m-a", "lo "),
        RUN,
        DONE,
        delta("m-b", "world"),
        line(type="result", message="Hello world"),
    )
    assert translate(sse) == [
        {"type": "start", "messageId": "m1"},
        {"type": "reasoning-start", "id": "m-a"},
        {"type": "reasoning-delta", "id": "m-a", "delta": "hmm"},
        {"type": "reasoning-end", "id": "m-a"},
        {"type": "text-start", "id": "m-a"},
        {"type": "text-delta", "id": "m-a", "delta": "Hel"},
        {"type": "text-delta", "id": "m-a", "delta": "lo "},
        {"type": "text-end", "id": "m-a"},
        {
            "type": "tool-input-available",
            "toolCallId": "s1",
            "toolName": "shell",
            "input": {"cmd": "ls"},
            "dynamic": True,
        },
        {"type": "tool-output-available", "toolCallId": "s1", "output": "a.txt", "dynamic": True},
        {"type": "text-start", "id": "m-b"},
        {"type": "text-delta", "id": "m-b", "delta": "world"},
        {"type": "text-end", "id": "m-b"},
        {"type": "finish"},
        "[DONE]",
    ]


def test_a_result_that_differs_from_the_streamed_text_is_sent_as_its_own_part() -> None:
    sse, _ = live_sse(delta("t", "Draft"), line(type="result", message="Final"))
    assert translate(sse)[-6:] == [
        {"type": "text-end", "id": "t"},
        {"type": "text-start", "id": "text"},
        {"type": "text-delta", "id": "text", "delta": "Final"},
        {"type": "text-end", "id": "text"},
        {"type": "finish"},
        "[DONE]",
    ]


def test_an_error_ends_the_open_part_first() -> None:
    sse, _ = live_sse(delta("t", "Half"), end="cancel")
    assert [c["type"] for c in translate(sse)[:-1]] == [
        "start",
        "text-start",
        "text-delta",
        "text-end",
        "error",
        "finish",
    ]


PERMISSION_TURN = (
    RUN,
    pending("p1"),
    resolved("p1", "reject"),
    step("s1", "failed", name="shell", error="rejected"),
    line(type="result", message="ok"),
)


def permission_data(status: str, reply: str | None = None) -> dict[str, Any]:
    data = {"type": "permission", "id": "p1", "status": status, "options": OPTIONS}
    data |= {"step": "s1", "title": "Run ls"}
    return data | ({"reply": reply} if reply else {})


@pytest.mark.parametrize(
    ("ai_version", "approval", "response"),
    [
        (5, [], []),
        (6, [{"type": "tool-approval-request", "approvalId": "p1", "toolCallId": "s1"}], []),
        (
            7,
            [{"type": "tool-approval-request", "approvalId": "p1", "toolCallId": "s1"}],
            [
                {
                    "type": "tool-approval-response",
                    "approvalId": "p1",
                    "approved": False,
                    "reason": "reject",
                }
            ],
        ),
    ],
)
def test_a_permission_is_a_data_part_and_a_tool_approval_for_the_versions_that_know_it(
    ai_version: int, approval: list[Any], response: list[Any]
) -> None:
    sse, _ = live_sse(*PERMISSION_TURN)
    sent = translate(sse, ai_version)
    pending_data = {"type": "data-permission", "id": "p1", "data": permission_data("pending")}
    resolved_data = pending_data | {"data": permission_data("resolved", "reject")}
    assert sent[2:-6] == [pending_data, *approval, resolved_data, *response]


def test_a_request_about_no_running_step_is_no_tool_approval() -> None:
    sse, _ = live_sse(pending("p1"), resolved("p1"), line(type="result", message="ok"))
    assert [c["type"] for c in translate(sse, 7)[1:-5]] == ["data-permission"] * 2


def test_a_request_still_pending_at_the_end_is_closed_as_stored() -> None:
    sse, proc = live_sse(RUN, pending("p1"), end="cancel")
    sent = translate(sse, 6)
    closed = [c for c in sent if c != "[DONE]" and c["type"] == "data-permission"][-1]
    (block,) = [b for b in stored(proc) if b["type"] == "permission"]
    assert closed["data"] == block
    assert block["reply"] == "cancelled"


def test_a_permission_frame_breaking_a_rule_raises() -> None:
    stream = UIMessageStream("m1")
    frame = b"event: permission\ndata: " + resolved("p9").rstrip(b"\n") + b"\n\n"
    with pytest.raises(UIMessageStreamError, match="never pending"):
        stream.feed(frame)
    assert stream.feed(b"event: ping\ndata: {}\n\n") == b""


_live_lines = st.one_of(
    st.builds(
        delta,
        st.sampled_from(["a", "b"]),
        st.text(min_size=1, max_size=5),
        st.sampled_from(["text", "reasoning"]),
    ),
    st.builds(pending, st.sampled_from(["p1", "p2"])),
    st.builds(resolved, st.sampled_from(["p1", "p2"])),
    st.builds(
        lambda i, s: step(i, s, name="shell"),
        st.sampled_from(["s1", "s2"]),
        st.sampled_from(["running", "succeeded", "failed"]),
    ),
    st.builds(lambda m: line(type="result", message=m), st.text(max_size=5)),
)


@given(
    lines=st.lists(_live_lines, max_size=20),
    end=st.sampled_from(["close", "cancel", "none"]),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=10),
    ai_version=st.sampled_from([5, 6, 7]),
)
def test_every_chunking_gives_the_same_well_formed_live_stream(
    lines: list[bytes], end: str, cuts: list[int], ai_version: int
) -> None:
    sse, proc = live_sse(*lines, end=end)
    whole = UIMessageStream("m1", ai_version=ai_version)
    expected = whole.feed(sse) + whole.close()
    stream = UIMessageStream("m1", ai_version=ai_version)
    out = b""
    bounds = [0, *sorted(c % (len(sse) + 1) for c in cuts), len(sse)]
    for start, stop in pairwise(bounds):
        out += stream.feed(sse[start:stop])
    assert out + stream.close() == expected

    parsed = chunks(expected)
    open_part: tuple[str, str] | None = None
    text = ""
    for chunk in parsed[:-1]:
        kind = chunk["type"]
        if ai_version == 5:
            assert set(chunk) <= ALLOWED_LIVE_KEYS[kind], chunk
        if kind.endswith("-start") and kind != "start":
            assert open_part is None  # one part open at a time
            open_part = (kind.removesuffix("-start"), chunk["id"])
        elif kind.endswith("-delta"):
            assert open_part == (kind.removesuffix("-delta"), chunk["id"])
            text += chunk["delta"] if kind == "text-delta" else ""
        elif kind.endswith("-end"):
            assert open_part == (kind.removesuffix("-end"), chunk["id"])
            open_part = None
        else:
            assert open_part is None, chunk  # any other chunk comes after the part ended
    # The streamed text, then the result only when it differs: the client's text ends
    # with the turn's result.
    if proc.turn.result is not None:
        assert text.endswith(proc.turn.result.message)
        if proc.turn.text == proc.turn.result.message:
            assert text == proc.turn.text
