"""Identifiers and the wall clock.

Ids are a short prefix and 128 random bits (``chat_…``, ``msg_…``, ``file_…``,
``sess_…``). Times are Unix epoch milliseconds from the wall clock, because leases and
token expiries are compared across processes sharing one database.
"""

from __future__ import annotations

import secrets
import time

__all__ = ["new_id", "now_ms"]


def new_id(prefix: str) -> str:
    """``prefix`` + ``_`` + 32 hex digits."""
    return f"{prefix}_{secrets.token_hex(16)}"


def now_ms() -> int:
    """The wall clock as Unix epoch milliseconds."""
    return time.time_ns() // 1_000_000
