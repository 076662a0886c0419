"""A chat turn's SSE frames, rendered from its runner session's chunks.

Each chunk is a line the runner has validated, so a frame is the line's own bytes under
``id: <cursor>`` and the event its ``type`` names (``step``, with the ``live``
extension the chat asks for ``delta`` and ``permission``, and with the ``usage``
extension ``usage``: the tokens of each model call), with no validation or fold;
``log`` lines are not forwarded (ids may skip cursors). Around them: ``start`` (``id: 0``),
``files`` (no ``id``, right before the terminal) and ``done`` (the terminal's cursor + 1).
So a client resuming with ``Last-Event-ID: N`` gets exactly the frames with ``id`` > N.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import count
from typing import Any, Final

import msgspec

from sandstream.core import SINGLE_LINE_FRAME, data_fields, event_field, line_frames
from sandstream.server.sessions import split_chunks

__all__ = [
    "START_ID",
    "TurnFrames",
    "done_frame",
    "files_frame",
    "live_frames",
    "start_frame",
]

START_ID: Final = 0
"""The ``start`` frame's id: a client that saw it resumes after cursor 0."""

_STEP: Final = event_field("step")
_DELTA: Final = event_field("delta")
_PERMISSION: Final = event_field("permission")
_USAGE: Final = event_field("usage")
_RESULT: Final = event_field("result")
_ERROR: Final = event_field("error")
_HEADS: Final = {
    "step": _STEP,
    "delta": _DELTA,
    "permission": _PERMISSION,
    "usage": _USAGE,
    "result": _RESULT,
    "error": _ERROR,
    "log": None,
}
_PREFIXES: Final = (
    (b'{"type":"step"', _STEP),
    (b'{"type":"delta"', _DELTA),
    (b'{"type":"log"', None),
    (b'{"type":"permission"', _PERMISSION),
    (b'{"type":"usage"', _USAGE),
    (b'{"type":"result"', _RESULT),
    (b'{"type":"error"', _ERROR),
)
_TERMINAL_HEADS: Final = (_RESULT, _ERROR)
_encoder: Final = msgspec.json.Encoder()
_STEP_START: Final = b'{"type":"step"'
_NEXT_STEP: Final = b'\n{"type":"step"'
"""A line boundary followed by a step line (JSON strings hold no raw newline)."""


class _Kind(msgspec.Struct):
    type: str


class _Request(msgspec.Struct):
    id: str
    status: str


_kind: Final = msgspec.json.Decoder(_Kind).decode
_request: Final = msgspec.json.Decoder(_Request).decode


def _head(line: bytes) -> bytes | None:
    """The ``event:`` line for ``line``'s type (``None``: not forwarded): read from the
    line's first bytes when it starts as the container writes it, else by decoding only
    its ``type``."""
    for prefix, head in _PREFIXES:
        if line.startswith(prefix):
            return head
    try:
        return _HEADS.get(_kind(line).type)
    except msgspec.DecodeError:  # the runner stores envelope lines only
        return None


class TurnFrames:
    """Renders chunks, in cursor order, as frames; notices the terminal.

    Once the terminal line is met, ``terminal`` is ``"result"`` or ``"error"`` and its
    frame is kept in ``terminal_frame`` instead of being returned (the caller puts the
    ``files`` frame before it); nothing after it is rendered. ``asked``: the ids of the
    pending permission requests rendered so far (the caller empties it when it has
    taken them).
    """

    __slots__ = ("asked", "terminal", "terminal_cursor", "terminal_frame")

    def __init__(self) -> None:
        self.terminal: str | None = None
        self.terminal_cursor = 0
        self.terminal_frame = b""
        self.asked: list[str] = []

    def render_run(self, first: int, data: bytes, count: int) -> bytes:
        """The frames of ``count`` chunks (``\\n``-terminated lines at cursors
        ``first``, …), given joined in ``data``."""
        if data and self.terminal is None and _steps_only(data, count):
            return line_frames(first, data, count, _STEP)
        return self._render_each(first, split_chunks(data))

    def _render_each(self, first: int, chunks: list[bytes]) -> bytes:
        parts: list[bytes] = []
        for cursor, chunk in zip(count(first), chunks):
            if self.terminal is not None:
                break
            line = chunk[:-1]
            head = _head(line)
            if head is None:
                continue
            if 13 in line:  # a CR inside the line (JSON whitespace): one data: per part
                frame = b"id: %d\n%b%b\n" % (cursor, head, data_fields(line))
            else:
                frame = SINGLE_LINE_FRAME % (cursor, head, line)
            if head is _PERMISSION:
                self._note(line)
            if head not in _TERMINAL_HEADS:
                parts.append(frame)
            else:
                self.terminal = "result" if head is _RESULT else "error"
                self.terminal_cursor = cursor
                self.terminal_frame = frame
        return b"".join(parts)

    def _note(self, line: bytes) -> None:
        """Add a pending permission request's id to ``asked``."""
        try:
            request = _request(line)
        except msgspec.DecodeError:  # the runner stores envelope lines only
            return
        if request.status == "pending":
            self.asked.append(request.id)


def _steps_only(data: bytes, count: int) -> bool:
    """Whether the ``count`` lines of ``data`` are all step lines as the container
    writes them, with no CR: one count over the run, no Python step per line."""
    steps = data.count(_NEXT_STEP) + data.startswith(_STEP_START)
    return steps == count and 13 not in data


def live_frames(first: int, data: bytes, count: int) -> bytes:
    """The frames of ``count`` chunks, joined in ``data``, for a caught-up viewer whose
    runs are written live (:mod:`sandstream.server.http.fanout`): the session never
    offers it the run holding the terminal (the viewer's own task reads that one, to
    put the ``files`` and ``done`` around it), so these are never terminal frames."""
    return TurnFrames().render_run(first, data, count)


def start_frame(data: Mapping[str, Any]) -> bytes:
    """The ``start`` frame (``id: 0``)."""
    return SINGLE_LINE_FRAME % (START_ID, event_field("start"), _encoder.encode(data))


def files_frame(files: list[Any]) -> bytes:
    """The ``files`` frame (no ``id``) for the files the run wrote back."""
    return b"event: files\n" + data_fields(_encoder.encode({"files": files})) + b"\n"


def done_frame(terminal: str, terminal_cursor: int) -> bytes:
    """The ``done`` frame after the terminal at ``terminal_cursor``."""
    payload = b'{"terminal":"%s","diagnostics":0}' % terminal.encode()
    return SINGLE_LINE_FRAME % (terminal_cursor + 1, event_field("done"), payload)
