"""The session wire: SSE frames parse back to the chunks and cursors, whatever the chunking."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core.sse import PING
from sandstream.core.sse_parser import Comment, ServerSentEvent, SSEParser
from sandstream.server.sessions.wire import batch_messages, control_message, sse_control, sse_run

lines = st.lists(
    st.builds(
        lambda text, ts, whitespace: (
            msgspec.json.encode(
                {"type": "log", "level": "info", "message": text, "ts": ts}
            ).replace(b',"level"', b"," + whitespace + b'"level"')
            + b"\n"
        ),
        st.text(max_size=60),
        st.integers(min_value=0, max_value=2**40),
        st.sampled_from([b"", b"", b"\r", b" \r\t"]),  # a CR is JSON whitespace too
    ),
    min_size=1,
    max_size=12,
)


@given(lines, st.integers(min_value=1, max_value=10**9), st.data())
def test_sse_frames_carry_each_chunk_with_its_cursor(
    chunks: list[bytes], first: int, data: st.DataObject
) -> None:
    body = (
        PING
        + sse_run(first, b"".join(chunks), len(chunks))
        + PING
        + sse_control(first + len(chunks) - 1, up_to_date=True)
        + sse_control(first + len(chunks) - 1, closed=True)
    )
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=8)))
    parser: SSEParser[ServerSentEvent | Comment] = SSEParser(include_comments=True)
    items: list[ServerSentEvent | Comment] = []
    start = 0
    for cut in [*cuts, len(body)]:
        items += parser.feed(body[start:cut])
        start = cut
    events = [item for item in items if isinstance(item, ServerSentEvent)]
    assert [item.text for item in items if isinstance(item, Comment)] == ["ping"] * 2
    data_events, controls = events[: len(chunks)], events[len(chunks) :]
    # SSE carries a CR (JSON whitespace) as a line break: LF, the same JSON
    sent = [chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n") for chunk in chunks]
    assert [event.data.encode() + b"\n" for event in data_events] == sent
    assert [int(event.id) for event in data_events] == list(range(first, first + len(chunks)))
    assert [event.event for event in controls] == ["control", "control"]
    last = first + len(chunks) - 1
    assert [msgspec.json.decode(event.data) for event in controls] == [
        {"cursor": last, "upToDate": True},
        {"cursor": last, "streamClosed": True},
    ]
    assert controls[-1].id == str(last)  # controls never move the last event id


def test_websocket_control_messages_are_tagged_control() -> None:
    assert msgspec.json.decode(control_message(7, closed=True)) == {
        "type": "control",
        "cursor": 7,
        "streamClosed": True,
    }
    assert control_message(3, gone=True).startswith('{"type":"control",')


@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"") + b"\n"), max_size=30),
    st.integers(min_value=1, max_value=200),
)
def test_batch_messages_cut_whole_lines_within_the_limit(chunks: list[bytes], limit: int) -> None:
    data = b"".join(chunks)
    messages = list(batch_messages(data, limit))
    assert b"".join(messages) == data
    assert all(message.endswith(b"\n") for message in messages)
    cut = [line + b"\n" for message in messages for line in message[:-1].split(b"\n")]
    assert cut == chunks  # only between lines
    for message in messages:
        assert len(message) <= limit or message.count(b"\n") == 1
    for message, following in itertools.pairwise(messages):  # each as full as it can be
        assert len(message) + following.index(b"\n") + 1 > limit


def test_batch_messages_refuse_what_is_no_ndjson() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        list(batch_messages(b"{}\n", 0))
    with pytest.raises(ValueError, match="end with LF"):
        list(batch_messages(b"{}\n{}", 10))
