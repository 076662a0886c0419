"""The durable sessions' exceptions, under :class:`SessionError`."""

from __future__ import annotations

from sandstream.server.errors import ServerError

__all__ = [
    "CursorGoneError",
    "PermissionAnsweredError",
    "PermissionNotFoundError",
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


class PermissionNotFoundError(SessionError):
    """The session's agent never asked permission request ``request_id``."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"no permission request {request_id!r} in this session")
        self.request_id = request_id


class PermissionAnsweredError(SessionError):
    """Permission request ``request_id`` was answered already, or resolved otherwise
    (timed out, cancelled): the first answer wins."""

    def __init__(self, request_id: str, reply: str | None) -> None:
        detail = "answered already" if reply is None else f"resolved already ({reply})"
        super().__init__(f"permission request {request_id!r} was {detail}")
        self.request_id = request_id
        self.reply = reply


class SessionNotFoundError(SessionError, KeyError):
    """No session with this id (never created, or retired by retention)."""
