"""Properties of the stdin framing: dispatch line, then message lines (any content)."""

from __future__ import annotations

import io
import json

import msgspec
import trio
from hypothesis import given
from hypothesis import strategies as st

from sandstream.container.dispatch import decode_dispatch, read_dispatch
from sandstream.container.inbox import Inbox, read_messages
from sandstream.container.output import Emitter
from sandstream.core.schemas import UserMessage

texts = st.text(max_size=200)
dispatches = st.fixed_dictionaries(
    {
        "agent_url": st.just("http://127.0.0.1:9/api"),
        "otp_setup": st.text(min_size=1, max_size=20),
        "otp_run": st.text(min_size=1, max_size=20),
        "prompt": texts,
    }
)


@given(dispatches, st.lists(texts, max_size=8), st.sampled_from([None, 1, 2]))
def test_one_line_dispatch_then_messages_and_pretty_files(
    dispatch: dict[str, str], messages: list[str], indent: int | None
) -> None:
    encoded = json.dumps(dispatch, indent=indent).encode()
    lines = [msgspec.json.encode(UserMessage(text=text)) + b"\n" for text in messages]
    if indent is not None:  # a pretty-printed file: the whole of stdin, no messages
        lines = []
    stdin = io.BytesIO(encoded + b"\n" + b"".join(lines))
    raw = read_dispatch(None, stdin)
    assert decode_dispatch(raw).prompt == dispatch["prompt"]
    if indent is None:  # one line: the messages are left on stdin, untouched
        assert raw == encoded + b"\n"
        assert stdin.read() == b"".join(lines)
    else:
        assert stdin.read() == b""


hostile = st.sampled_from([b"[" * 100_000, b"\xff\xfe", b'{"type": "message", "text": "\xc3"}'])


@given(
    st.lists(texts, max_size=8),
    st.lists(st.binary(max_size=40) | hostile, max_size=4),
)
async def test_every_message_line_reaches_the_inbox_and_junk_is_skipped(
    messages: list[str], junk: list[bytes]
) -> None:
    lines = [msgspec.json.encode(UserMessage(text=text)) + b"\n" for text in messages]
    bad = [line.replace(b"\n", b"") + b"\n" for line in junk if not line.strip().startswith(b"{")]
    mixed = [line for pair in zip(lines, bad, strict=False) for line in pair]
    mixed += lines[len(bad) :]
    out = bytearray()
    inbox = Inbox()
    with trio.fail_after(10):
        await read_messages(io.BytesIO(b"".join(mixed)), inbox, Emitter(out.extend))
    assert inbox.take() == messages[: len(lines)]
    warnings = [json.loads(line)["message"] for line in out.splitlines()]
    assert len(warnings) == sum(1 for line in bad[: len(lines)] if line.strip())
