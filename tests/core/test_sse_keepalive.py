"""The keep-alive comment is ignored by every client, wherever it falls between frames.

httpx-sse (like @microsoft/fetch-event-source) dispatches an event on every blank
line once an id was seen, even with no ``data:``; a keep-alive followed by a blank
line (``: ping\\n\\n``) was an empty ``message`` event there, breaking every
``JSON.parse(e.data)``. The keep-alive is one comment line and nothing more. These
tests read the processor's frames, with pings between them, with the real httpx-sse
decoder (over an in-memory ``httpx.Response``) and with the core's own parser.
"""

from __future__ import annotations

import json

import httpx
from httpx_sse import EventSource
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core import PING, StreamProcessor
from sandstream.core.sse import format_comment
from sandstream.core.sse_parser import SSEParser
from tests.core.helpers import line, step

TURN = [
    step("s1", "running"),
    line(type="log", level="info", message="working"),
    step("s1", "succeeded", result={"ok": True}),
    line(type="result", message="done"),
]


def frames_of_a_turn() -> list[bytes]:
    """The turn's SSE output, one entry per feed (start, each line, close)."""
    proc = StreamProcessor()
    out = [proc.start({"chatId": "c1"})]
    out += [proc.feed(raw) for raw in TURN]
    out.append(proc.close())
    return [chunk for chunk in out if chunk]


CHUNKS = frames_of_a_turn()


def httpx_sse_events(body: bytes) -> list[tuple[str, str, str]]:
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    return [(e.event, e.data, e.id) for e in EventSource(response).iter_sse()]


def core_events(body: bytes) -> list[tuple[str, str, str]]:
    parser = SSEParser()
    return [(e.event, e.data, e.id) for e in parser.feed(body) + parser.close()]


def test_the_ping_is_one_comment_line_and_no_blank_line() -> None:
    assert PING == b": ping\n"
    assert StreamProcessor().ping() == PING
    assert StreamProcessor("trace").ping() == PING
    assert StreamProcessor("ndjson").ping() == b""


def test_httpx_sse_sees_no_event_for_pings_between_frames() -> None:
    proc = StreamProcessor()
    chunks = frames_of_a_turn()
    pinged = PING.join([b"", *chunks, b""]) + proc.ping() * 3
    expected = httpx_sse_events(b"".join(chunks))
    assert [kind for kind, _, _ in expected] == ["start", "step", "step", "result", "done"]
    assert httpx_sse_events(pinged) == expected
    assert core_events(pinged) == expected
    for _, data, _ in expected:
        json.loads(data)


@given(
    where=st.lists(st.booleans(), min_size=len(CHUNKS) + 1, max_size=len(CHUNKS) + 1),
    text=st.sampled_from(["ping", "", "keep-alive", "two\nlines"]),
)
def test_comments_anywhere_between_frames_dispatch_nothing(where: list[bool], text: str) -> None:
    comment = format_comment(text)
    assert not comment.endswith(b"\n\n") and comment.endswith(b"\n")
    slots = zip(where, [*CHUNKS, b""], strict=True)  # a comment may go before each frame
    pinged = b"".join((comment if ping else b"") + chunk for ping, chunk in slots)
    plain = b"".join(CHUNKS)
    assert httpx_sse_events(pinged) == httpx_sse_events(plain)
    assert core_events(pinged) == core_events(plain)
