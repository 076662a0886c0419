"""The durable sessions' exceptions, under :class:`SessionError`."""

from __future__ import annotations

import sqlite3

from sandstream.server.errors import ServerError

__all__ = [
    "CursorGoneError",
    "EarlierAppendFailedError",
    "SessionEndedError",
    "SessionError",
    "SessionNotFoundError",
]


class SessionError(ServerError):
    """Base class of the durable sessions' exceptions."""


class CursorGoneError(SessionError):
    """The chunks after ``cursor`` are no longer retained (the first kept is ``first``)."""

    def __init__(self, cursor: int, first: int) -> None:
        super().__init__(f"cursor {cursor} is below the retained chunks (from {first})")
        self.cursor = cursor
        self.first = first


class SessionEndedError(SessionError):
    """The session has ended: it takes no more messages."""


class SessionNotFoundError(SessionError, KeyError):
    """No session with this id (never created, or retired by retention)."""


class EarlierAppendFailedError(SessionError, sqlite3.Error):
    """A run was not stored because an earlier run of its session failed."""
