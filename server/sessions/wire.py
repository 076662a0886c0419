"""How a reader's events are written: SSE frames, NDJSON lines, WebSocket messages.

The formats are docs/protocol.md's ("Durable sessions"): SSE one frame per chunk, ``id:``
its cursor, and ``control`` events without ``id``; NDJSON the chunks as they are;
WebSocket a text message per chunk, or with ``?batch=N`` binary messages of whole
chunks (:func:`batch_messages`), controls always text.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from sandstream.core import format_event, line_frames

from .buffer import split_chunks

__all__ = [
    "batch_messages",
    "control_message",
    "ndjson_run",
    "sse_caught_up",
    "sse_control",
    "sse_run",
]


class _Control(msgspec.Struct, omit_defaults=True, kw_only=True):
    cursor: int
    upToDate: bool = False  # Durable Streams' names
    streamClosed: bool = False
    gone: bool = False


def sse_run(first: int, data: bytes, count: int) -> bytes:
    """The SSE frames of ``count`` chunks joined in ``data`` (each a ``\n``-terminated
    line), ids from ``first``."""
    if 13 not in data:
        return line_frames(first, data, count)
    chunks = split_chunks(data)  # a CR inside a line (JSON whitespace): one data: per part
    return b"".join(
        format_event(chunk[:-1], id=cursor) for cursor, chunk in enumerate(chunks, first)
    )


def sse_caught_up(first: int, data: bytes, count: int) -> bytes:
    """:func:`sse_run`, then the ``upToDate`` control at the last one's cursor: what
    a reader gets for chunks that bring it up to date with a live session."""
    return sse_run(first, data, count) + sse_control(first + count - 1, up_to_date=True)


def ndjson_run(first: int, data: bytes, count: int) -> bytes:
    """The chunks as they are (NDJSON needs no cursor: ``first`` and ``count`` are
    unused)."""
    return data


def batch_messages(data: bytes, limit: int) -> Iterator[bytes]:
    """``data`` (whole ``\n``-terminated lines) cut into pieces of whole lines, each at
    most ``limit`` bytes, except a line longer than ``limit``, which is a piece alone.
    The cuts are found in C (``rfind``): no Python step per line. Raises ``ValueError``
    for a ``limit`` below 1 or ``data`` that does not end with ``\n``."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if data and not data.endswith(b"\n"):
        raise ValueError("data must end with LF")
    start, size = 0, len(data)
    while size - start > limit:
        cut = data.rfind(b"\n", start, start + limit)
        if cut < 0:  # the next line is longer than limit: it goes alone
            cut = data.index(b"\n", start + limit)
        yield data[start : cut + 1]
        start = cut + 1
    if start < size:
        yield data[start:] if start else data


def sse_control(
    cursor: int, *, up_to_date: bool = False, closed: bool = False, gone: bool = False
) -> bytes:
    """A ``control`` event (no ``id``)."""
    return format_event(_control(cursor, up_to_date, closed, gone), event="control")


def control_message(
    cursor: int, *, up_to_date: bool = False, closed: bool = False, gone: bool = False
) -> str:
    """A WebSocket control message: ``{"type": "control", "cursor": N, …}``."""
    return (b'{"type":"control",' + _control(cursor, up_to_date, closed, gone)[1:]).decode()


def _control(cursor: int, up_to_date: bool, closed: bool, gone: bool) -> bytes:
    control = _Control(cursor=cursor, upToDate=up_to_date, streamClosed=closed, gone=gone)
    return msgspec.json.encode(control)
