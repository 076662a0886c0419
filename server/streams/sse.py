"""The ``live=sse`` wire: ``data`` and ``control`` events (sans-IO).

A ``data`` event carries a range of whole appends: text as it is, one ``data:`` line
per line of it (CR, LF and CRLF all end a line, so nothing in the payload can end the
event or start another; no space after the colon unless the line starts with one);
JSON mode as its JSON array; any other content type base64 encoded (the response then
says ``stream-sse-data-encoding: base64``). Every ``data`` event is followed by a
``control`` event with the next offset and, while the stream is open, a cursor;
:func:`live_events` are the two for an append offered to the live readers.
"""

from __future__ import annotations

import base64
import re
from typing import Final, Literal, TypeAlias

import msgspec

from .jsonmode import is_json, json_body
from .live import LiveAppend
from .offsets import format_offset

__all__ = ["SseEncoding", "control_event", "data_event", "live_events", "sse_encoding"]

SseEncoding: TypeAlias = Literal["text", "json", "base64"]
_LINE_BREAK: Final = re.compile(rb"\r\n|\r|\n")
_encode: Final = msgspec.json.Encoder().encode


def sse_encoding(content_type: str) -> SseEncoding:
    """How a stream of ``content_type`` travels over SSE."""
    if is_json(content_type):
        return "json"
    if content_type.split(";", 1)[0].strip().lower().startswith("text/"):
        return "text"
    return "base64"


def data_event(payload: bytes, encoding: SseEncoding) -> bytes:
    """The ``data`` event of stored bytes ``payload`` (whole appends)."""
    if encoding == "json":
        text = json_body(payload)
    elif encoding == "base64":
        text = base64.b64encode(payload)
    else:
        text = payload
    lines = _LINE_BREAK.split(text)
    return b"event: data\n" + b"".join(_data_line(line) for line in lines) + b"\n"


def _data_line(line: bytes) -> bytes:
    """``data:`` and the line; a space between only when the line starts with one (a
    reader drops the first space after the colon)."""
    return (b"data: " if line.startswith(b" ") else b"data:") + line + b"\n"


def control_event(next_offset: str, *, cursor: str | None, up_to_date: bool, closed: bool) -> bytes:
    """The ``control`` event after a data event, or on its own when there is none."""
    fields: dict[str, object] = {"streamNextOffset": next_offset}
    if closed:
        fields["streamClosed"] = True
        fields["upToDate"] = True
    else:
        if cursor is not None:
            fields["streamCursor"] = cursor
        if up_to_date:
            fields["upToDate"] = True
    return b"event: control\ndata:" + _encode(fields) + b"\n\n"


def live_events(append: LiveAppend, encoding: SseEncoding) -> bytes:
    """The ``data`` event of ``append`` and the ``upToDate`` control after it: what a
    live reader of an open stream gets for the append it is offered."""
    record = append.record
    return data_event(record.payload, encoding) + control_event(
        format_offset(record.end), cursor=str(append.cursor), up_to_date=True, closed=False
    )
