"""The durable sessions' exceptions, under :class:`SessionError`.

The permission errors are problems of their own (404 :data:`PERMISSION_NOT_FOUND`, 409
:data:`PERMISSION_ANSWERED`), answered in the chat API's words; the session routes
answer them with their own members (``request_id``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from sandstream.server.errors import ProblemError, ServerError

__all__ = [
    "PERMISSION_ANSWERED",
    "PERMISSION_NOT_FOUND",
    "CursorGoneError",
    "PermissionAnsweredError",
    "PermissionNotFoundError",
    "SessionEndedError",
    "SessionError",
    "SessionNotFoundError",
]

PERMISSION_NOT_FOUND: Final = "urn:sandstream:problem:permission-not-found"
PERMISSION_ANSWERED: Final = "urn:sandstream:problem:permission-answered"


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


class PermissionNotFoundError(SessionError, ProblemError):
    """The session's agent never asked permission request ``request_id`` (404)."""

    status: ClassVar[int] = 404
    type: ClassVar[str] = PERMISSION_NOT_FOUND
    title: ClassVar[str] = "Permission request not found"

    def __init__(self, request_id: str) -> None:
        super().__init__(f"no permission request {request_id!r} in this session")
        self.request_id = request_id

    def detail(self) -> str:
        return f"the running turn has no permission request {self.request_id!r}"

    def extensions(self) -> dict[str, Any]:
        return {"requestId": self.request_id}


class PermissionAnsweredError(SessionError, ProblemError):
    """Permission request ``request_id`` was answered already, or resolved otherwise
    (timed out, cancelled): the first answer wins (409)."""

    status: ClassVar[int] = 409
    type: ClassVar[str] = PERMISSION_ANSWERED
    title: ClassVar[str] = "Permission request answered"

    def __init__(self, request_id: str, reply: str | None) -> None:
        detail = "answered already" if reply is None else f"resolved already ({reply})"
        super().__init__(f"permission request {request_id!r} was {detail}")
        self.request_id = request_id
        self.reply = reply

    def detail(self) -> str:
        return f"{self}: the first answer wins"

    def extensions(self) -> dict[str, Any]:
        return {"requestId": self.request_id, "reply": self.reply}


class SessionNotFoundError(SessionError, KeyError):
    """No session with this id (never created, or retired by retention)."""
