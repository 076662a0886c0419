"""The chat's SSE frames of a session's chunks: the same frames however the chunks are
batched, parsed back by the core's parser to exactly the session's lines."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core import Error, Log, Result, Step, encode_line
from sandstream.core.sse_parser import SSEParser
from sandstream.server.chat.turns.frames import TurnFrames, done_frame, start_frame

_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12)
_step = st.builds(
    lambda i, status, text: encode_line(
        Step(id=f"s{i}", name="tool", status=status, args={"t": text}, ts=1)
    ),
    st.integers(0, 3),
    st.sampled_from(["running", "succeeded", "failed"]),
    _text,
)
_log = st.builds(lambda text: encode_line(Log(level="info", message=text, ts=1)), _text)
_reordered = st.builds(  # a producer that writes "type" last, and one with a CR in it
    lambda text: b'{"id":"x","name":"n","status":"running","ts":1,\r"type":"step"}\n', _text
)
_terminal = st.one_of(
    st.builds(lambda text: encode_line(Result(message=text, ts=1)), _text),
    st.builds(lambda text: encode_line(Error(code="boom", message=text, ts=1)), _text),
)


def _render(chunks: list[bytes], cuts: list[int]) -> bytes:
    """Rendered in runs cut at ``cuts``."""
    frames = TurnFrames()
    out = b""
    start = 0
    for cut in [*sorted(set(cuts)), len(chunks)]:
        batch = chunks[start:cut]
        out += frames.render_run(start + 1, b"".join(batch), len(batch))
        start = cut
    assert frames.terminal is not None
    return out + frames.terminal_frame + done_frame(frames.terminal, frames.terminal_cursor)


@given(
    st.lists(st.one_of(_step, _step, _log, _reordered), max_size=30),
    _terminal,
    st.lists(st.integers(0, 31), max_size=8),
    st.lists(st.integers(1, 40), max_size=6),
)
def test_every_batching_renders_the_same_frames_and_parses_back_to_the_lines(
    lines: list[bytes], terminal: bytes, cuts: list[int], splits: list[int]
) -> None:
    chunks = [*lines, terminal]
    cuts = [c for c in cuts if c <= len(chunks)]
    whole = _render(chunks, [])
    assert _render(chunks, cuts) == whole
    assert _render(chunks, list(range(len(chunks)))) == whole  # one chunk per batch
    parser = SSEParser()
    stream = start_frame({"chatId": "c"}) + whole
    events = []
    at = 0
    for size in [*splits, len(stream)]:
        events += parser.feed(stream[at : at + size])
        at += size
    events += parser.close()
    assert events[0].event == "start" and events[0].id == "0"
    shown = [
        (str(cursor), line) for cursor, line in enumerate(chunks, 1) if b'"type":"log"' not in line
    ]
    assert [(e.id, (e.data + "\n").encode()) for e in events[1:-1]] == [
        (cursor, line.replace(b"\r", b"\n")) for cursor, line in shown
    ]
    kinds = [msgspec.json.decode(line.replace(b"\r", b" "))["type"] for _, line in shown]
    assert [e.event for e in events[1:-1]] == kinds
    assert events[-1].event == "done" and int(events[-1].id) == len(chunks) + 1
