"""``Stream-Cursor``: the interval cursors that keep CDN-collapsed live reads moving.

Time is cut into 20-second intervals counted from 2024-10-09T00:00:00Z; a live
response's cursor is the current interval, or, when the client already echoes a cursor
at or past it, that cursor plus a random 1 to 3600 seconds' worth of intervals (so a
cursor never repeats and never goes back). The later control events of an SSE
response carry the current interval or the highest cursor it gave before, whichever is
higher (:func:`interval_cursor`). A client cursor that is not a decimal number is
ignored.
"""

from __future__ import annotations

import math
import secrets
import time
from typing import Final

__all__ = ["interval_cursor", "response_cursor"]

_EPOCH: Final = 1728432000.0
_INTERVAL: Final = 20.0


def interval_cursor(now: float | None = None) -> int:
    """The current interval (``now``, epoch seconds: by default the time now)."""
    return int(((time.time() if now is None else now) - _EPOCH) // _INTERVAL)


def response_cursor(client_cursor: str | None, now: float | None = None) -> str:
    """The ``Stream-Cursor`` of a live response to a request that echoed
    ``client_cursor``."""
    current = interval_cursor(now)
    if (
        client_cursor is None
        or not (client_cursor.isascii() and client_cursor.isdigit())
        or len(client_cursor) > 18
    ):
        return str(current)
    echoed = int(client_cursor)
    if echoed < current:
        return str(current)
    jitter_seconds = 1 + secrets.randbelow(3600)
    return str(echoed + max(1, math.ceil(jitter_seconds / _INTERVAL)))
