"""UsageMeter: the tokens of a model call read from its answer's bytes, for each protocol.

Real-world transcripts (tests/data/model_usage) give the exact numbers; the stand-in's
writers (benchmarks/support/model_wire.py) give answers of any shape; every chunking
gives the same usage, a cut gives what the complete events said, and no bytes raise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.support.model_wire import Reply, ToolCall, render_json, render_stream
from sandstream.core import ModelProtocol, Usage, UsageMeter
from sandstream.core.model_usage import _READERS
from sandstream.core.sse_parser import SSEParser

DATA: Final = Path(__file__).resolve().parents[1] / "data" / "model_usage"
SSE: Final = "text/event-stream; charset=utf-8"
JSON: Final = "application/json"
PROTOCOLS: Final[tuple[ModelProtocol, ...]] = ("anthropic", "chat", "responses", "gemini")

# file, protocol, usage (input, output, cached input, cache write), model, complete
TRANSCRIPTS: Final[list[tuple[str, ModelProtocol, Usage, str | None, bool]]] = [
    (
        "anthropic_stream.sse",
        "anthropic",
        Usage(25, 387, 8204, 1510),
        "claude-sonnet-4-5-20250929",
        True,
    ),
    (
        "anthropic_stream_cumulative.sse",
        "anthropic",
        Usage(25, 387, 8204, 1510),
        "claude-sonnet-4-5-20250929",
        True,
    ),
    (
        "anthropic_overloaded.sse",
        "anthropic",
        Usage(2048, 3, 0, 0),
        "claude-opus-4-1-20250805",
        False,
    ),
    (
        "anthropic_message.json",
        "anthropic",
        Usage(2095, 503, 0, 0),
        "claude-haiku-4-5-20251001",
        True,
    ),
    ("anthropic_error.json", "anthropic", Usage(), None, False),
    ("chat_stream.sse", "chat", Usage(93, 46, 1024), "gpt-4.1-2025-04-14", True),
    ("chat_stream_no_usage.sse", "chat", Usage(), "gpt-4.1-2025-04-14", False),
    ("chat_completion.json", "chat", Usage(95, 1200, 1920), "o3-mini-2025-01-31", True),
    ("chat_error.json", "chat", Usage(), None, False),
    ("responses_stream.sse", "responses", Usage(138, 514, 2944), "gpt-5-codex", True),
    ("responses_incomplete.sse", "responses", Usage(120, 64, 0), "o4-mini-2025-04-16", True),
    ("responses.json", "responses", Usage(36, 87, 0), "gpt-4.1-2025-04-14", True),
    ("gemini_stream.sse", "gemini", Usage(195, 500, 7995), "gemini-2.5-pro", True),
    ("gemini_stream.json", "gemini", Usage(195, 500, 7995), "gemini-2.5-pro", True),
    ("gemini_generate.json", "gemini", Usage(170, 200, 0), "gemini-2.5-flash", True),
    ("gemini_blocked.json", "gemini", Usage(31, 0, 0), "gemini-2.5-flash", True),
]


def content_type(name: str) -> str:
    return SSE if name.endswith(".sse") else JSON


def meter(
    protocol: ModelProtocol, kind: str | None, chunks: Sequence[bytes], **options: Any
) -> tuple[Usage, str | None, bool]:
    """Feed ``chunks`` to a new meter and close it: (usage, model, complete)."""
    usage_meter = UsageMeter(protocol, content_type=kind, **options)
    for chunk in chunks:
        usage_meter.feed(chunk)
    return usage_meter.close(), usage_meter.model, usage_meter.complete


def cut(data: bytes, points: Sequence[int]) -> list[bytes]:
    """``data`` cut at ``points`` (any order, repeats and ends allowed)."""
    bounds = [0, *sorted({min(p, len(data)) for p in points}), len(data)]
    return [data[a:b] for a, b in pairwise(bounds)]


def complete_events(data: bytes) -> bytes:
    """The bytes of the SSE events ``data`` (LF line ends) holds whole."""
    end = data.rfind(b"\n\n")
    return data[: end + 2] if end >= 0 else b""


# -- real-world transcripts ------------------------------------------------------------


@pytest.mark.parametrize(("name", "protocol", "usage", "model", "complete"), TRANSCRIPTS)
def test_a_transcript_gives_its_provider_s_numbers(
    name: str, protocol: ModelProtocol, usage: Usage, model: str | None, complete: bool
) -> None:
    data = (DATA / name).read_bytes()
    assert meter(protocol, content_type(name), [data]) == (usage, model, complete)


@pytest.mark.parametrize(("name", "protocol", "usage", "model", "complete"), TRANSCRIPTS)
@settings(max_examples=40)
@given(points=st.lists(st.integers(0, 1 << 14), max_size=12))
def test_every_chunking_of_a_transcript_gives_the_same(
    name: str,
    protocol: ModelProtocol,
    usage: Usage,
    model: str | None,
    complete: bool,
    points: list[int],
) -> None:
    data = (DATA / name).read_bytes()
    assert meter(protocol, content_type(name), cut(data, points)) == (usage, model, complete)


@pytest.mark.parametrize("name", ["anthropic_stream.sse", "gemini_stream.sse", "chat_stream.sse"])
def test_crlf_and_cr_line_ends_read_the_same(name: str) -> None:
    data = (DATA / name).read_bytes()
    protocol = next(t[1] for t in TRANSCRIPTS if t[0] == name)
    whole = meter(protocol, SSE, [data])
    for line_end in (b"\r\n", b"\r"):
        other = data.replace(b"\n", line_end)
        assert meter(protocol, SSE, [other]) == whole
        assert meter(protocol, SSE, [other[i : i + 1] for i in range(len(other))]) == whole


@pytest.mark.parametrize(
    "name", [t[0] for t in TRANSCRIPTS if t[0].endswith(".sse")]
)  # every cut of every streamed transcript, exhaustively
def test_a_cut_stream_gives_what_its_complete_events_said(name: str) -> None:
    data = (DATA / name).read_bytes()
    protocol = next(t[1] for t in TRANSCRIPTS if t[0] == name)
    for end in range(len(data) + 1):
        assert meter(protocol, SSE, [data[:end]]) == meter(
            protocol, SSE, [complete_events(data[:end])]
        ), end


def test_an_anthropic_stream_cut_after_message_start_has_its_input_and_first_output() -> None:
    data = (DATA / "anthropic_stream.sse").read_bytes()
    first = data[: data.index(b"\n\n") + 2]
    assert meter("anthropic", SSE, [first]) == (
        Usage(25, 1, 8204, 1510),
        "claude-sonnet-4-5-20250929",
        False,
    )


def test_a_chat_stream_cut_before_its_usage_chunk_counts_nothing() -> None:
    data = (DATA / "chat_stream.sse").read_bytes()
    before = data[: data.rfind(b"data: ", 0, data.index(b'"choices":[],'))]
    assert meter("chat", SSE, [before]) == (Usage(), "gpt-4.1-2025-04-14", False)


def test_a_gemini_json_array_cut_short_gives_its_complete_elements() -> None:
    events = [
        line[6:]
        for line in (DATA / "gemini_stream.sse").read_text().splitlines()
        if line.startswith("data: ")
    ]
    elements = [json.dumps(json.loads(event), indent=1).encode() for event in events]
    data = b"[" + b",\r\n".join(elements) + b"]"
    ends = [len(b"[" + b",\r\n".join(elements[: n + 1])) for n in range(len(elements))]
    for end in range(len(data)):
        whole = sum(1 for e in ends if e <= end)
        expected = meter(
            "gemini", SSE, [b"".join(b"data: %s\n\n" % e.encode() for e in events[:whole])]
        )
        assert meter("gemini", JSON, [data[:end]]) == expected, end
        if whole:
            assert expected[0] != Usage()


def test_a_json_answer_cut_short_counts_nothing() -> None:
    for name, protocol, *_ in TRANSCRIPTS:
        data = (DATA / name).read_bytes()
        if name.endswith(".json") and not data.startswith(b"["):
            assert meter(protocol, JSON, [data[:-2]]) == (Usage(), None, False)


def test_no_content_type_is_a_json_answer() -> None:
    data = (DATA / "chat_completion.json").read_bytes()
    assert meter("chat", None, [data])[0] == Usage(95, 1200, 1920)


# -- the stand-in's answers -----------------------------------------------------------

words = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)
replies = st.builds(
    Reply,
    model=st.sampled_from(["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro"]),
    reasoning=st.lists(words, max_size=3).map(tuple),
    text=st.lists(words, max_size=3).map(tuple),
    tool_call=st.none()
    | st.builds(ToolCall, st.just("call_1"), st.just("Bash"), st.just({"command": "ls"})),
    input_tokens=st.integers(0, 1 << 20),
    output_tokens=st.integers(0, 1 << 20),
)


def stream_of(protocol: ModelProtocol, reply: Reply) -> bytes:
    return b"".join(event.encode() for event in render_stream(protocol, reply))


@settings(max_examples=60)
@given(
    protocol=st.sampled_from(PROTOCOLS),
    reply=replies,
    points=st.lists(st.integers(0, 1 << 12), max_size=10),
)
def test_every_chunking_of_a_stand_in_stream_gives_its_usage(
    protocol: ModelProtocol, reply: Reply, points: list[int]
) -> None:
    data = stream_of(protocol, reply)
    expected = (Usage(reply.input_tokens, reply.output), reply.model, True)
    assert meter(protocol, SSE, cut(data, points)) == expected


@settings(max_examples=60)
@given(
    protocol=st.sampled_from(PROTOCOLS),
    reply=replies,
    points=st.lists(st.integers(0, 1 << 12), max_size=10),
)
def test_every_chunking_of_a_stand_in_json_answer_gives_its_usage(
    protocol: ModelProtocol, reply: Reply, points: list[int]
) -> None:
    data = json.dumps(render_json(protocol, reply), ensure_ascii=False).encode()
    expected = (Usage(reply.input_tokens, reply.output), reply.model, True)
    assert meter(protocol, JSON, cut(data, points)) == expected


@settings(max_examples=60)
@given(protocol=st.sampled_from(PROTOCOLS), reply=replies, data=st.data())
def test_a_stand_in_stream_cut_anywhere_gives_what_its_complete_events_said(
    protocol: ModelProtocol, reply: Reply, data: st.DataObject
) -> None:
    stream = stream_of(protocol, reply)
    end = data.draw(st.integers(0, len(stream)))
    points = data.draw(st.lists(st.integers(0, end), max_size=6))
    got = meter(protocol, SSE, cut(stream[:end], points))
    assert got == meter(protocol, SSE, [complete_events(stream[:end])])
    final = Usage(reply.input_tokens, reply.output)
    assert got[2] == (got[0] == final and end >= len(stream) - _after_final(protocol, stream))


def _after_final(protocol: ModelProtocol, stream: bytes) -> int:
    """Bytes of ``stream`` after the event that carries its final usage."""
    marker = {
        "anthropic": b"event: message_delta\n",
        "chat": b'"choices":[],"usage"',
        "responses": b"event: response.completed\n",
        "gemini": b'"usageMetadata"',
    }[protocol]
    start = stream.rfind(marker)
    return len(stream) - (stream.index(b"\n\n", start) + 2)


def test_a_stand_in_stream_without_its_final_usage_is_not_complete() -> None:
    reply = Reply("gpt-5", reasoning=("hm",), text=("hi",), input_tokens=7, output_tokens=3)
    final = re.compile(
        r'"type":"(message_delta|response\.completed)"|"choices":\[\],|usageMetadata'
    )
    for protocol in PROTOCOLS:
        events = [e for e in render_stream(protocol, reply) if not final.search(e.data)]
        usage, model, complete = meter(protocol, SSE, [b"".join(e.encode() for e in events)])
        assert (model, complete) == ("gpt-5", False)
        # what the earlier events said: anthropic's message_start, the stand-in's
        # response.created (real ones carry no usage there)
        assert usage == {"anthropic": Usage(7, 1), "responses": Usage(7, 3)}.get(protocol, Usage())


# -- bad input never raises -----------------------------------------------------------

json_keys = st.sampled_from(
    [
        "type", "message", "usage", "model", "response", "choices", "finish_reason",
        "usageMetadata", "candidates", "finishReason", "modelVersion", "input_tokens",
        "output_tokens", "prompt_tokens", "completion_tokens", "cached_tokens",
        "prompt_tokens_details", "input_tokens_details", "promptTokenCount",
        "candidatesTokenCount", "cache_read_input_tokens", "message_start", "message_delta",
    ]
)  # fmt: skip
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["message_start", "message_delta", "message", "response.completed"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(json_keys | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=200)
@given(
    protocol=st.sampled_from(PROTOCOLS),
    kind=st.sampled_from([SSE, JSON, None, "text/plain"]),
    data=st.binary(max_size=600),
    points=st.lists(st.integers(0, 600), max_size=8),
)
def test_random_bytes_never_raise(
    protocol: ModelProtocol, kind: str | None, data: bytes, points: list[int]
) -> None:
    usage, _, _ = meter(protocol, kind, cut(data, points))
    assert min(usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) >= 0


@settings(max_examples=300)
@given(protocol=st.sampled_from(PROTOCOLS), documents=st.lists(json_values, max_size=4))
def test_random_json_documents_never_raise(protocol: ModelProtocol, documents: list[Any]) -> None:
    encoded = [json.dumps(document).encode() for document in documents]
    stream = b"".join(b"data: %s\n\n" % document for document in encoded)
    for kind, data in ((SSE, stream), (JSON, b"[" + b",".join(encoded) + b"]")):
        usage, _, _ = meter(protocol, kind, [data])
        assert usage.total >= 0
    for document in encoded:
        meter(protocol, JSON, [document])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hostile_documents_never_raise(protocol: ModelProtocol) -> None:
    deep = b'{"usage":' + b"[" * 100_000
    for data in (
        deep,
        b"data: " + deep + b"\n\n",
        b'data: {"usage": {"prompt_tokens": 1e400}}\n\n',
        b'data: {"usage": {"input_tokens": 99999999999999999999999999}}\n\n',
        b'data: {"type":"message_delta","usage":{"output_tokens":-5}}\n\n',
        b"\xff\xfe\x00data: \xc3\x28\n\n",
        b"[" * 1000,
    ):
        for kind in (SSE, JSON):
            assert meter(protocol, kind, [data])[0].total >= 0


def test_a_json_answer_over_the_bound_counts_nothing() -> None:
    data = (DATA / "chat_completion.json").read_bytes()
    assert meter("chat", JSON, [data], max_body_bytes=len(data) - 1) == (Usage(), None, False)
    assert meter("chat", JSON, [data], max_body_bytes=len(data))[0] == Usage(95, 1200, 1920)


def test_a_stream_past_the_event_bound_reads_nothing_more() -> None:
    data = (DATA / "chat_stream.sse").read_bytes()
    first = data[: data.index(b"\n\n") + 2]
    long_line = b'data: {"x": "' + b"a" * 5000 + b'"}\n\n'
    got = meter("chat", SSE, [first, long_line, data], max_event_chars=4000)
    assert got == (Usage(), "gpt-4.1-2025-04-14", False)


def test_feed_after_close_is_ignored_and_close_is_idempotent() -> None:
    usage_meter = UsageMeter("responses", content_type=JSON)
    usage_meter.feed((DATA / "responses.json").read_bytes())
    first = usage_meter.close()
    usage_meter.feed(b"garbage")
    assert usage_meter.close() == first == Usage(36, 87, 0)


def test_a_bad_protocol_or_bound_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="protocol"):
        UsageMeter("bedrock", content_type=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_body_bytes"):
        UsageMeter("chat", content_type=None, max_body_bytes=0)


# -- Usage ----------------------------------------------------------------------------


counts = st.integers(0, 1 << 40)


@given(
    a=st.builds(Usage, counts, counts, counts, counts),
    b=st.builds(Usage, counts, counts, counts, counts),
)
def test_usage_adds_field_by_field_and_totals_its_four_counts(a: Usage, b: Usage) -> None:
    total = a + b
    assert total.total == a.total + b.total
    assert total == Usage(
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.cached_input_tokens + b.cached_input_tokens,
        a.cache_write_tokens + b.cache_write_tokens,
    )
    assert a + Usage() == a


def test_a_meter_s_line_is_its_usage() -> None:
    usage_meter = UsageMeter("anthropic", content_type=SSE)
    usage_meter.feed((DATA / "anthropic_stream.sse").read_bytes())
    line = usage_meter.line(ts=5)
    assert (line.protocol, line.model, line.complete, line.ts) == (
        "anthropic",
        "claude-sonnet-4-5-20250929",
        True,
        5,
    )
    assert (line.input_tokens, line.output_tokens) == (25, 387)
    assert (line.cached_input_tokens, line.cache_write_tokens) == (8204, 1510)


# -- only the events that can count are parsed --------------------------------------

_EVENTS: Final = {
    "chat": [
        b'{"model":"m1","choices":[{"delta":{"content":"hi"},"finish_reason":null}]}',
        b'{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}}',
        b'{"choices":[{"finish_reason":"stop"}]}',
    ],
    "anthropic": [
        b'{"type":"message_start","message":{"model":"m2","usage":{"input_tokens":5}}}',
        b'{"type":"message_delta","usage":{"output_tokens":7}}',
    ],
    "responses": [
        b'{"type":"response.completed","response":{"model":"m3","usage":{"input_tokens":3,'
        b'"output_tokens":2}}}',
    ],
    "gemini": [
        b'{"candidates":[{"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":8,'
        b'"candidatesTokenCount":1},"modelVersion":"m4"}',
    ],
}
_FILLER: Final = [b'{"type":"content_block_delta","delta":{"text":"x"}}', b"not json", b"x" * 300]


@settings(max_examples=150)
@given(
    protocol=st.sampled_from(sorted(_EVENTS)),
    picks=st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from(["\n", "\r\n", "\r"])), max_size=25
    ),
    points=st.lists(st.integers(0, 1 << 13), max_size=10),
)
def test_skipping_the_events_without_usage_reads_what_parsing_all_reads(
    protocol: ModelProtocol,
    picks: list[tuple[int, str]],
    points: list[int],
) -> None:
    """The meter parses only the events that may name its fields: the same result as
    a meter that parses every event, in any chunking, whatever the line ends."""
    choices = [*_EVENTS[protocol], *_FILLER]
    data = b"".join(
        b"data: " + choices[pick % len(choices)] + (end * 2).encode() for pick, end in picks
    )
    reader = _READERS[protocol]()
    for event in SSEParser().feed(data):
        reader.event(event.data)
    expected = (reader.usage, reader.model, reader.complete)
    assert meter(protocol, SSE, cut(data, points)) == expected
