"""Properties of the stdin framing: dispatch line, then message lines (any content)."""

from __future__ import annotations

import io
import json
from typing import Any

import msgspec
import trio
from hypothesis import given
from hypothesis import strategies as st

from sandstream.container.dispatch import (
    decode_binding,
    decode_dispatch,
    read_binding,
    read_dispatch,
)
from sandstream.container.errors import DispatchError
from sandstream.container.inbox import Inbox, read_messages
from sandstream.container.output import Emitter
from sandstream.core.schemas import UserMessage, WarmBinding

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


class _Chunked(io.RawIOBase):
    """A pipe's read end: ``data`` in the chunks given (each read returns at most one)."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data = data
        self._sizes = sizes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = min(self._sizes.pop(0) if self._sizes else len(self._data), len(buffer))
        chunk, self._data = self._data[:size], self._data[size:]
        buffer[: len(chunk)] = chunk
        return len(chunk)


envs = st.dictionaries(st.text(min_size=1, max_size=10), texts, max_size=4)


@given(envs, dispatches, st.lists(texts, max_size=4), st.lists(st.integers(1, 64)))
def test_a_warm_binding_then_the_dispatch_in_every_chunking(
    env: dict[str, str], dispatch: dict[str, str], messages: list[str], sizes: list[int]
) -> None:
    binding = msgspec.json.encode(WarmBinding(env=env)) + b"\n"
    encoded = json.dumps(dispatch).encode() + b"\n"
    lines = b"".join(msgspec.json.encode(UserMessage(text=text)) + b"\n" for text in messages)
    stdin = io.BufferedReader(_Chunked(binding + encoded + lines, sizes), buffer_size=16)
    assert read_binding(stdin).env == env
    raw = read_dispatch(None, stdin)
    assert raw == encoded and decode_dispatch(raw).prompt == dispatch["prompt"]
    assert stdin.read() == lines


@given(st.binary(max_size=200))
def test_a_bad_binding_is_a_dispatch_error(data: bytes) -> None:
    try:
        decoded = decode_binding(data)
    except DispatchError:
        return
    assert data.endswith(b"\n") and decoded == msgspec.json.decode(data, type=WarmBinding)
