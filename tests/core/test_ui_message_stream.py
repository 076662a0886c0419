"""The chat's SSE → the AI SDK UI message stream: exact chunks, closing, bad input, and
the same output for every chunking of the input."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core import StreamProcessor, UIMessageStream, UIMessageStreamError
from sandstream.core.persistence import StepTraceBlock, assistant_message
from sandstream.core.sse_parser import SSEParser
from tests.core.helpers import line, step

# The keys ai 5.0.0's uiMessageChunkSchema allows (strict objects), per chunk type we send.
ALLOWED_KEYS = {
    "start": {"type", "messageId", "messageMetadata"},
    "tool-input-available": {
        "type",
        "toolCallId",
        "toolName",
        "input",
        "providerExecuted",
        "providerMetadata",
        "dynamic",
    },
    "tool-output-available": {"type", "toolCallId", "output", "providerExecuted", "dynamic"},
    "tool-output-error": {"type", "toolCallId", "errorText", "providerExecuted", "dynamic"},
    "text-start": {"type", "id", "providerMetadata"},
    "text-delta": {"type", "id", "delta", "providerMetadata"},
    "text-end": {"type", "id", "providerMetadata"},
    "error": {"type", "errorText"},
    "finish": {"type", "messageMetadata"},
    "message-metadata": {"type", "messageMetadata"},
}


def chat_sse(*lines: bytes, end: str = "close", files: bool = False) -> tuple[bytes, Any]:
    """The chat's SSE for ``lines`` (start frame, a ping, maybe a files frame, the lines,
    then ``end``: close/cancel/none) and the processor's folded turn."""
    proc = StreamProcessor("sse")
    out = proc.start({"chatId": "c1", "assistantMessageId": "m1"}) + proc.ping()
    if files:
        out += proc.event("files", {"files": [{"id": "f1", "name": "a.txt", "size": 1}]})
    for one in lines:
        out += proc.feed(one)
    if end == "close":
        out += proc.close()
    elif end == "cancel":
        out += proc.cancel("the client disconnected")
    return out, proc.turn


def translate(sse: bytes, message_id: str = "m1") -> bytes:
    stream = UIMessageStream(message_id)
    return stream.feed(sse) + stream.close()


def chunks(ui: bytes) -> list[Any]:
    """The UI stream's chunks (``[DONE]`` as the string), parsed as an SSE client would."""
    parser = SSEParser()
    datas = [event.data for event in parser.feed(ui) + parser.close()]
    return [data if data == "[DONE]" else json.loads(data) for data in datas]


def test_a_turn_becomes_tool_parts_then_its_text() -> None:
    sse, _ = chat_sse(
        step("s1", "running", name="run_shell", args={"command": "ls"}),
        step("s1", "succeeded", name="run_shell", result={"stdout": "a\n"}),
        step("s2", "running", name="read_file", args={"path": "x"}),
        step("s2", "failed", name="read_file", error="no such file"),
        step("s3", "succeeded", name="list_files", result=[1]),
        line(type="result", message="all done\n"),
        files=True,
    )
    assert chunks(translate(sse)) == [
        {"type": "start", "messageId": "m1"},
        {
            "type": "tool-input-available",
            "toolCallId": "s1",
            "toolName": "run_shell",
            "input": {"command": "ls"},
            "dynamic": True,
        },
        {
            "type": "tool-output-available",
            "toolCallId": "s1",
            "output": {"stdout": "a\n"},
            "dynamic": True,
        },
        {
            "type": "tool-input-available",
            "toolCallId": "s2",
            "toolName": "read_file",
            "input": {"path": "x"},
            "dynamic": True,
        },
        {
            "type": "tool-output-error",
            "toolCallId": "s2",
            "errorText": "no such file",
            "dynamic": True,
        },
        {
            "type": "tool-input-available",
            "toolCallId": "s3",
            "toolName": "list_files",
            "input": None,
            "dynamic": True,
        },
        {"type": "tool-output-available", "toolCallId": "s3", "output": [1], "dynamic": True},
        {"type": "text-start", "id": "text"},
        {"type": "text-delta", "id": "text", "delta": "all done\n"},
        {"type": "text-end", "id": "text"},
        {"type": "finish"},
        "[DONE]",
    ]


def test_pings_pass_through_and_the_chats_own_events_send_nothing() -> None:
    sse, _ = chat_sse(line(type="result", message="ok"), files=True)
    sse = b"event: unknown\ndata: {}\n\n" + sse
    ui = translate(sse)
    assert ui.count(b": ping\n") == 1
    assert [c if c == "[DONE]" else c["type"] for c in chunks(ui)] == [
        "start",
        "text-start",
        "text-delta",
        "text-end",
        "finish",
        "[DONE]",
    ]


def test_later_args_are_sent_again_and_a_failed_step_without_error_says_failed() -> None:
    sse, _ = chat_sse(
        step("s1", "running", args={"v": 1}),
        step("s1", "running"),
        step("s1", "failed", args={"v": 2}),
        line(type="result", message=""),
    )
    assert chunks(translate(sse))[1:4] == [
        {
            "type": "tool-input-available",
            "toolCallId": "s1",
            "toolName": "files/read",
            "input": {"v": 1},
            "dynamic": True,
        },
        {
            "type": "tool-input-available",
            "toolCallId": "s1",
            "toolName": "files/read",
            "input": {"v": 2},
            "dynamic": True,
        },
        {"type": "tool-output-error", "toolCallId": "s1", "errorText": "failed", "dynamic": True},
    ]


@pytest.mark.parametrize(
    ("terminal", "end"),
    [
        (line(type="error", code="model_error", message="no"), "none"),
        (line(type="result", message="early"), "none"),
        (b"", "cancel"),
        (b"", "close"),
    ],
)
def test_steps_running_at_the_end_close_as_the_stored_message_closes_them(
    terminal: bytes, end: str
) -> None:
    sse, turn = chat_sse(
        step("s1", "running", args={"a": 1}),
        step("s2", "running"),
        step("s1", "succeeded"),
        step("s3", "running"),
        terminal,
        end=end,
    )
    stored = assistant_message(turn, message_id="m1", created_at=0)
    block = next(b for b in stored.content if isinstance(b, StepTraceBlock))
    traces = {t.id: t for t in block.steps}
    closing = [
        c for c in chunks(translate(sse)) if c != "[DONE]" and c["type"] == "tool-output-error"
    ]
    assert closing == [
        {
            "type": "tool-output-error",
            "toolCallId": i,
            "errorText": traces[i].error,
            "dynamic": True,
        }
        for i in ("s2", "s3")
    ]
    assert all(traces[i].error for i in ("s2", "s3"))


def test_an_error_terminal_is_an_error_chunk_then_finish() -> None:
    sse, _ = chat_sse(line(type="error", code="runtime_exceeded", message="too long"), end="none")
    assert chunks(translate(sse))[1:] == [
        {"type": "error", "errorText": "[runtime_exceeded] too long"},
        {"type": "finish"},
        "[DONE]",
    ]


def test_input_that_ends_without_a_terminal_ends_with_an_error() -> None:
    sse, _ = chat_sse(step("s1", "running"), end="none")
    stream = UIMessageStream("m1")
    ui = stream.feed(sse)
    assert not stream.finished
    reason = "the connection dropped"
    ui += stream.close(reason)
    assert stream.finished
    assert stream.close() == b"" and stream.feed(b"event: step\ndata: {}\n\n") == b""
    assert chunks(ui)[-4:] == [
        {
            "type": "tool-output-error",
            "toolCallId": "s1",
            "errorText": f"the turn ended before this step finished: [upstream_closed] {reason}",
            "dynamic": True,
        },
        {"type": "error", "errorText": f"[upstream_closed] {reason}"},
        {"type": "finish"},
        "[DONE]",
    ]


def test_start_comes_first_even_with_no_input() -> None:
    assert chunks(UIMessageStream("m9").close())[0] == {"type": "start", "messageId": "m9"}


def test_payload_line_breaks_stay_inside_their_frame() -> None:
    sse, _ = chat_sse(
        b'{"type":"step","id":"s1","name":"n","status":"running","args":{\r"a":\r1}}\n',
        line(type="result", message="a\r\nb"),
    )
    parsed = chunks(translate(sse))
    assert parsed[1]["input"] == {"a": 1}
    assert next(c["delta"] for c in parsed if c != "[DONE]" and "delta" in c) == "a\r\nb"


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"event: step\ndata: {not json\n\n", "no envelope line"),
        (b'event: step\ndata: {"type":"step","id":"s"}\n\n', "no envelope line"),
        (
            b'event: result\ndata: {"type":"error","code":"x","message":"y"}\n\n',
            "holds a 'error' line",
        ),
        (b"event: step\ndata: " + b"[" * 100_000 + b"\n\n", "no envelope line"),
    ],
)
def test_a_frame_that_is_not_the_chats_raises_and_ends_the_stream(
    frame: bytes, reason: str
) -> None:
    stream = UIMessageStream("m1")
    with pytest.raises(UIMessageStreamError, match=reason):
        stream.feed(frame)
    assert stream.finished and stream.feed(line(type="result", message="x")) == b""


def test_input_over_the_parsers_bound_raises() -> None:
    with pytest.raises(UIMessageStreamError):
        UIMessageStream("m1").feed(b"data: " + b"x" * (1 << 20) + b"\n")


# -- every chunking -----------------------------------------------------------------------

_payloads = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_lines = st.one_of(
    st.builds(
        lambda i, s, a, r: step(i, s, args=a, result=r),
        st.sampled_from(["s1", "s2", "s3", "s4"]),
        st.sampled_from(["running", "succeeded", "failed"]),
        _payloads,
        _payloads,
    ),
    st.builds(lambda m: line(type="log", level="info", message=m), st.text(max_size=10)),
    st.builds(lambda m: line(type="result", message=m), st.text(max_size=12)),
    st.just(line(type="error", code="boom", message="it broke")),
    st.just(b"not json\n"),
)


@given(
    lines=st.lists(_lines, max_size=20),
    end=st.sampled_from(["close", "cancel", "none"]),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=12),
)
def test_every_chunking_gives_the_same_well_formed_stream(
    lines: list[bytes], end: str, cuts: list[int]
) -> None:
    sse, _ = chat_sse(*lines, end=end, files=True)
    whole = translate(sse)
    stream = UIMessageStream("m1")
    pieces = b""
    bounds = [0, *sorted(c % (len(sse) + 1) for c in cuts), len(sse)]
    for start, stop in pairwise(bounds):
        pieces += stream.feed(sse[start:stop])
    assert pieces + stream.close() == whole

    parsed = chunks(whole)
    assert parsed[0] == {"type": "start", "messageId": "m1"}
    assert parsed[-2:] == [{"type": "finish"}, "[DONE]"]
    seen: set[str] = set()
    for chunk in parsed[:-1]:
        assert set(chunk) <= ALLOWED_KEYS[chunk["type"]], chunk
        if chunk["type"] == "tool-input-available":
            seen.add(chunk["toolCallId"])
        elif chunk["type"].startswith("tool-output"):
            assert chunk["toolCallId"] in seen  # useChat fails on an output it has not seen
    assert [c["type"] for c in parsed[:-1]].count("finish") == 1


def test_chunks_are_encoded_as_their_structs_say() -> None:
    # One frame per chunk, each a single data: line (no id:, no event:), as the SDK writes.
    sse, _ = chat_sse(step("s1", "succeeded", result={"x": 1}), line(type="result", message="y"))
    frames = translate(sse).replace(b": ping\n", b"").split(b"\n\n")
    assert frames[-1] == b""
    assert all(f.startswith(b"data: ") and b"\n" not in f for f in frames[:-1])
    assert msgspec.json.decode(frames[0][6:]) == {"type": "start", "messageId": "m1"}


def test_written_back_files_are_file_chunks_when_urls_are_given() -> None:
    sse, _ = chat_sse(line(type="result", message="ok"), files=True)
    stream = UIMessageStream("m1", file_url=lambda file_id: f"/files/{file_id}")
    parsed = chunks(stream.feed(sse) + stream.close())
    assert parsed[1] == {
        "type": "file",
        "url": "/files/f1",
        "mediaType": "application/octet-stream",
    }
    assert set(parsed[1]) <= {"type", "url", "mediaType", "providerMetadata"}  # ai 5.0.0's keys
    with pytest.raises(UIMessageStreamError, match="no file list"):
        UIMessageStream("m1", file_url=str).feed(b'event: files\ndata: {"files":[{}]}\n\n')


def test_each_model_call_is_message_metadata_with_the_turn_s_sums_so_far() -> None:
    """A ``usage`` frame is a ``message-metadata`` chunk with the turn's sums (the
    stored message's ``usage``); ``finish`` carries the last; a turn with no metered
    call has no metadata at all."""
    call = {"type": "usage", "protocol": "chat", "input_tokens": 10, "output_tokens": 3}
    cached = {**call, "cached_input_tokens": 5, "cache_write_tokens": 0, "status": 200}
    proc = StreamProcessor("sse", extensions=["usage"])
    sse = proc.start({"chatId": "c1", "assistantMessageId": "m1"})
    sse += proc.feed(line(**call, cached_input_tokens=0, cache_write_tokens=0))
    sse += proc.feed(line(**cached)) + proc.feed(line(type="result", message="ok"))
    sse += proc.close()
    got = [c for c in chunks(translate(sse)) if c != "[DONE]"]
    metadata = [c for c in got if c["type"] in ("message-metadata", "finish")]
    assert metadata == [
        {
            "type": "message-metadata",
            "messageMetadata": {"usage": {"inputTokens": 10, "outputTokens": 3, "modelCalls": 1}},
        },
        {
            "type": "message-metadata",
            "messageMetadata": {
                "usage": {
                    "inputTokens": 20,
                    "outputTokens": 6,
                    "cachedInputTokens": 5,
                    "modelCalls": 2,
                }
            },
        },
        {
            "type": "finish",
            "messageMetadata": {
                "usage": {
                    "inputTokens": 20,
                    "outputTokens": 6,
                    "cachedInputTokens": 5,
                    "modelCalls": 2,
                }
            },
        },
    ]
    assert metadata[-1]["messageMetadata"] == {
        "usage": msgspec.to_builtins(
            assistant_message(proc.turn, message_id="m1", created_at=0).usage
        )
    }
    plain, _ = chat_sse(line(type="result", message="ok"))
    assert {"type": "finish"} in chunks(translate(plain))
    with pytest.raises(UIMessageStreamError, match="no usage line"):
        UIMessageStream("m1").feed(b'event: usage\ndata: {"type":"usage"}\n\n')
