"""The SSE writer (core.sse) read back by the SSE parser (core.sse_parser)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandstream.core import StreamProcessor
from sandstream.core.sse import PING, event_field, format_comment, format_event, line_frames
from sandstream.core.sse_parser import Comment, ServerSentEvent, SSEParser

# Field values the writer accepts: no CR, LF or NUL.
field_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x00"))
ids = st.one_of(st.none(), st.integers(min_value=0, max_value=2**63), field_text)
# Arbitrary payloads, biased towards every kind of line break and look-alike.
payloads = st.one_of(
    st.text(),
    st.lists(
        st.sampled_from(["a", " ", ":", "\r", "\n", "\r\n", "\u2028", "\u2029", "\x85", "\x0b"]),
        max_size=30,
    ).map("".join),
)
frames = st.tuples(
    payloads,
    st.one_of(st.none(), field_text),
    ids,
    st.one_of(st.none(), st.integers(min_value=0, max_value=10**12)),
)


def normalize(data: str) -> str:
    """The writer splits data at CR, LF and CRLF; the parser rejoins with LF."""
    return re.sub(r"\r\n|\r|\n", "\n", data)


@settings(max_examples=300)
@given(frames=st.lists(frames, max_size=8), cuts=st.lists(st.integers(0, 4000), max_size=12))
@example(frames=[("a\r\nb\rc\nd\u2028e\x85", "step", 3, None)], cuts=[8, 9])
@example(frames=[("", "", "", 0), (" lead", " x", " y", None)], cuts=[])
def test_written_frames_parse_back(
    frames: list[tuple[str, str | None, int | str | None, int | None]], cuts: list[int]
) -> None:
    stream = b"".join(
        format_event(data.encode(), event=event, id=id, retry=retry)
        for data, event, id, retry in frames
    )
    points = sorted({min(c, len(stream)) for c in cuts})
    bounds = [0, *points, len(stream)]
    parser = SSEParser()
    events: list[ServerSentEvent] = []
    for a, b in itertools.pairwise(bounds):
        events += parser.feed(stream[a:b])
    events += parser.close()

    expected: list[ServerSentEvent] = []
    last_id, last_retry = "", None
    for data, event, id, retry in frames:
        if id is not None:
            last_id = str(id)
        if retry is not None:
            last_retry = retry
        expected.append(
            ServerSentEvent(
                event=event or "message", data=normalize(data), id=last_id, retry=last_retry
            )
        )
    assert events == expected
    assert parser.last_event_id == last_id


@given(text=st.text())
def test_written_comments_parse_back_and_dispatch_nothing(text: str) -> None:
    parser = SSEParser(include_comments=True)
    items = parser.feed(format_comment(text) + format_event(b"after"))
    lines = normalize(text).split("\n")
    assert items == [*(Comment(line) for line in lines), ServerSentEvent(data="after")]


def test_ping_is_a_comment() -> None:
    parser = SSEParser(include_comments=True)
    assert parser.feed(PING) == [Comment("ping")]
    assert SSEParser().feed(PING) == []


def test_a_callers_event_is_numbered_in_the_turns_sequence() -> None:
    processor = StreamProcessor("sse")
    out = processor.start({"chatId": "c"})
    out += processor.feed(b'{"type":"step","id":"s","name":"n","status":"running"}\n')
    out += processor.event("files", {"files": [{"id": "f", "name": "a.md", "size": 1}]})
    out += processor.feed(b'{"type":"result","message":"ok"}\n')
    events = [e for e in SSEParser().feed(out) if isinstance(e, ServerSentEvent)]
    assert [(e.event, e.id) for e in events] == [
        ("start", "1"),
        ("step", "2"),
        ("files", "3"),
        ("result", "4"),
        ("done", "5"),
    ]
    assert events[2].data == '{"files":[{"id":"f","name":"a.md","size":1}]}'
    assert processor.turn.steps[0].status == "running"  # the caller's event is not folded
    assert StreamProcessor("ndjson").event("files", b"{}") == b""
    with pytest.raises(ValueError):
        processor.event("bad\nname", b"{}")


@given(
    lines=st.lists(
        st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")), max_size=20
    ),
    first=st.integers(0, 10**12),
    event=st.sampled_from([None, "step", "100%"]),
)
def test_line_frames_are_format_event_per_line(
    lines: list[bytes], first: int, event: str | None
) -> None:
    joined = b"".join(line + b"\n" for line in lines)
    head = b"" if event is None else event_field(event)
    expected = b"".join(
        format_event(line, event=event, id=at) for at, line in enumerate(lines, first)
    )
    assert line_frames(first, joined, len(lines), head) == expected


def test_line_frames_refuse_an_unterminated_line_or_a_wrong_count() -> None:
    with pytest.raises(ValueError, match="LF"):
        line_frames(1, b'{"type":"step"}', 1)
    for wrong in (1, 3):
        with pytest.raises(ValueError, match=f"hold 2 lines, not {wrong}"):
            line_frames(1, b"{}\n{}\n", wrong)
