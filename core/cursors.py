"""Cursors and SSE event ids from outside: one parser, one resume rule.

A cursor names a chunk of a stream (``?cursor=N``, ``Last-Event-ID: N``). Only its
canonical decimal form is one: ASCII digits, no sign, no whitespace, no ``_``, no
leading zero (``0`` itself aside), at most :data:`MAX_CURSOR` (2^53 - 1, the largest
integer a JavaScript client holds exactly). Anything else raises
:class:`~sandstream.core.errors.CursorError`, whose message is fit to show to the
sender. :func:`resume_cursor` picks the cursor of a resuming reader: ``Last-Event-ID``
(what an ``EventSource`` adds on each reconnect) over ``?cursor=`` (which it keeps in
its URL). Pure functions: no I/O, nothing to cancel.
"""

from __future__ import annotations

from typing import Final

from .errors import CursorError

__all__ = ["MAX_CURSOR", "parse_cursor", "resume_cursor"]

MAX_CURSOR: Final = 2**53 - 1
"""The largest cursor accepted (``Number.MAX_SAFE_INTEGER``)."""
_MAX_DIGITS: Final = len(str(MAX_CURSOR))
_SHOWN: Final = 40
"""The most characters of a refused value quoted back."""
_RULE: Final = (
    f"a decimal integer from 0 to {MAX_CURSOR} (ASCII digits only, no sign, space or leading zero)"
)


def parse_cursor(text: str, name: str = "cursor") -> int:
    """The cursor written as ``text``; raises :class:`CursorError` unless ``text`` is
    the canonical decimal form of an integer from 0 to :data:`MAX_CURSOR` (``name``:
    what the message calls it)."""
    if not text:
        raise CursorError(f"{name} is empty: {_RULE}")
    if not (text.isascii() and text.isdigit()) or (text[0] == "0" and len(text) > 1):
        raise CursorError(f"{name} must be {_RULE}, got {text[:_SHOWN]!r}")
    if len(text) > _MAX_DIGITS or (value := int(text)) > MAX_CURSOR:
        raise CursorError(f"{name} must be at most {MAX_CURSOR}, got {text[:_SHOWN]}")
    return value


def resume_cursor(query: str | None, last_event_id: str | None) -> int | None:
    """The cursor a reader resumes after: ``last_event_id`` when one is given (an
    empty one is none, as an SSE client's empty last event id), else ``query``
    (``None``: neither). Both are checked with :func:`parse_cursor`: a malformed one
    raises :class:`CursorError` even when the other wins."""
    after = None if query is None else parse_cursor(query, "cursor")
    if last_event_id:
        return parse_cursor(last_event_id, "Last-Event-ID")
    return after
