"""Offsets: opaque, fixed-width, lexicographically sortable tokens for log positions.

An offset is ``<epoch>_<position>``, two 16-digit decimal numbers: the epoch is always
zero (the field leaves room for a log that renumbers), the position is a byte position
in the stream's log (:mod:`.records`), which only grows. Fixed width makes string order
equal position order. ``-1`` (the beginning) and ``now`` (the tail) are the protocol's
sentinels and never minted. Anything else raises :class:`InvalidStreamRequestError`.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from .errors import InvalidStreamRequestError

__all__ = ["BEGINNING", "NOW", "ZERO_OFFSET", "format_offset", "parse_offset", "parse_read_offset"]

BEGINNING: Final = "-1"
NOW: Final = "now"
_WIDTH: Final = 16
_LIMIT: Final = 10**_WIDTH
_PATTERN: Final = re.compile(r"0{16}_([0-9]{16})")
ZERO_OFFSET: Final = f"{0:0{_WIDTH}d}_{0:0{_WIDTH}d}"


def format_offset(position: int) -> str:
    """The offset of log position ``position`` (0 <= position < 10**16)."""
    if not 0 <= position < _LIMIT:
        raise ValueError(f"log position out of range: {position}")
    return f"{0:0{_WIDTH}d}_{position:0{_WIDTH}d}"


def parse_offset(text: str) -> int:
    """The log position of an offset this server minted; raises
    :class:`InvalidStreamRequestError` for anything else (sentinels included)."""
    match = _PATTERN.fullmatch(text)
    if match is None:
        raise InvalidStreamRequestError(f"not an offset of this server: {text[:80]!r}")
    return int(match.group(1))


def parse_read_offset(text: str | None) -> int | Literal["-1", "now"]:
    """A read's ``offset`` parameter: a position, ``-1`` (also when absent) or ``now``."""
    if text is None or text == BEGINNING:
        return BEGINNING
    if text == NOW:
        return NOW
    if text == "":
        raise InvalidStreamRequestError("the offset parameter is empty")
    return parse_offset(text)
