"""Server-Sent Events frames, written exactly as the WHATWG event-stream format reads them.

A frame is ``id:``, ``event:``, one ``data:`` line per line of the payload, then a
blank line. Payload line breaks (CR, LF or CRLF) become separate ``data:`` lines, so
a parser rejoins them with LF; nothing else in the payload is touched (U+2028 and
U+0085 are not line breaks in SSE). Field values that would break the framing
(an ``id`` or ``event`` holding CR, LF or NUL) raise ``ValueError``.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "PING",
    "SINGLE_LINE_FRAME",
    "data_fields",
    "event_field",
    "format_comment",
    "format_event",
    "line_frames",
]

_LINE_BREAK: Final = re.compile(rb"\r\n|\r|\n")
_FORBIDDEN_IN_FIELD: Final = re.compile(r"[\r\n\x00]")

SINGLE_LINE_FRAME: Final = b"id: %d\n%bdata: %b\n\n"
"""``SINGLE_LINE_FRAME % (id, event_field(name), data)`` is the frame
``format_event(data, event=name, id=id)`` returns when ``data`` holds no CR or LF;
the hot path formats it directly."""


def line_frames(first: int, lines: bytes, count: int, head: bytes = b"") -> bytes:
    """The frames of ``lines``, ``count`` LF-terminated lines holding no CR, one frame
    each: ids ``first``, ``first + 1``, …, ``head`` (``event_field(name)`` or ``b""``),
    the line as its one ``data:`` line. The same bytes as joining
    ``SINGLE_LINE_FRAME % (id, head, line)`` over the lines, made without a Python step
    per line: the line breaks become frame boundaries in one ``replace``, then one
    ``%`` puts the ids in.

    A CR in ``lines`` would pass into a ``data:`` line unsplit: callers check for it
    (and fall back to :func:`data_fields`). ``b""`` gives ``b""``; ``lines`` that do not
    end with LF, or hold other than ``count`` lines, raise ``ValueError``.
    """
    if not lines:
        return b""
    if not lines.endswith(b"\n"):
        raise ValueError("lines must end with LF")
    frame_head = b"id: %d\n" + head.replace(b"%", b"%%") + b"data: "
    if 37 in lines:  # "%": literal in the template
        lines = lines.replace(b"%", b"%%")
    frames = lines.replace(b"\n", b"\n\n" + frame_head)  # a head after every line...
    template = b"".join((frame_head, memoryview(frames)[: len(frames) - len(frame_head)]))
    try:
        return template % tuple(range(first, first + count))  # ...moved before each one
    except TypeError:  # not as many ids as lines
        held = lines.count(b"\n")
        raise ValueError(f"lines hold {held} lines, not {count}") from None


def format_event(
    data: bytes,
    *,
    event: str | None = None,
    id: int | str | None = None,
    retry: int | None = None,
) -> bytes:
    """Return one SSE frame carrying ``data`` (UTF-8 bytes).

    ``event`` names the event (the client's default is ``message``); ``id`` sets the
    client's last event id; ``retry`` its reconnection delay in milliseconds.
    """
    head = b""
    if id is not None:
        head = b"id: %d\n" % id if type(id) is int else _field("id", str(id))
    if event is not None:
        head += event_field(event)
    if retry is not None:
        if retry < 0:
            raise ValueError(f"retry must be >= 0, got {retry}")
        head += b"retry: %d\n" % retry
    return head + data_fields(data) + b"\n"


def event_field(event: str) -> bytes:
    """The ``event:`` line for ``event``; ``ValueError`` if it holds CR, LF or NUL."""
    return _field("event", event)


def data_fields(data: bytes) -> bytes:
    """The ``data:`` lines carrying ``data``, one per line of it."""
    if 10 in data or 13 in data:
        return b"".join(b"data: " + line + b"\n" for line in _LINE_BREAK.split(data))
    return b"data: " + data + b"\n"


def format_comment(text: str = "") -> bytes:
    """Return SSE comment lines, one per line of ``text``, to go between two frames.

    Each line ends with LF and no blank line follows: a blank line is where a client
    dispatches, and httpx-sse and @microsoft/fetch-event-source dispatch an empty
    ``message`` event on one even when no ``data:`` came before it. Comment lines
    alone are ignored by every client (WHATWG, httpx-sse, fetch-event-source,
    eventsource-parser, npm ``eventsource``, sseclient-py), and, being whole lines,
    they leave the next frame intact.
    """
    lines = _LINE_BREAK.split(text.encode())
    return b"".join(b": " + line + b"\n" if line else b":\n" for line in lines)


PING: Final = format_comment("ping")
"""The keep-alive sent when a stream is idle, between frames: ``b": ping\\n"``."""


def _field(name: str, value: str) -> bytes:
    if _FORBIDDEN_IN_FIELD.search(value):
        raise ValueError(f"SSE {name} must not contain CR, LF or NUL: {value!r}")
    return name.encode() + b": " + value.encode() + b"\n"
