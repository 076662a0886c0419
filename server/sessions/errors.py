"""The durable sessions' exceptions, under :class:`SessionError`.

Each one a reader or a writer of a session can cause is a problem of its own (a
:class:`~sandstream.server.errors.ProblemError`): a session unknown (404), ended (409),
a cursor malformed or ahead of its stream (422) or below what is retained (410), a
permission request never asked (404) or answered before (409). The chat answers the
ones it lets through in the same words; extension members are named in camelCase and
the session routes answer them in snake_case (:func:`sandstream.server.http.snake_case`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from sandstream.server.errors import ProblemError, ServerError
from sandstream.server.http import NOT_FOUND

__all__ = [
    "CURSOR_AHEAD",
    "CURSOR_GONE",
    "INVALID_CURSOR",
    "PERMISSION_ANSWERED",
    "PERMISSION_NOT_FOUND",
    "SESSION_ENDED",
    "CursorAheadError",
    "CursorGoneError",
    "InvalidCursorError",
    "PermissionAnsweredError",
    "PermissionNotFoundError",
    "SessionEndedError",
    "SessionError",
    "SessionNotFoundError",
]

PERMISSION_NOT_FOUND: Final = "urn:sandstream:problem:permission-not-found"
PERMISSION_ANSWERED: Final = "urn:sandstream:problem:permission-answered"
SESSION_ENDED: Final = "urn:sandstream:problem:session-ended"
CURSOR_GONE: Final = "urn:sandstream:problem:cursor-gone"
INVALID_CURSOR: Final = "urn:sandstream:problem:invalid-cursor"
CURSOR_AHEAD: Final = "urn:sandstream:problem:cursor-ahead"


class SessionError(ServerError):
    """Base class of the durable sessions' exceptions."""


class CursorGoneError(SessionError, ProblemError):
    """The chunks after ``cursor`` are no longer retained (the first kept is ``first``;
    410)."""

    status: ClassVar[int] = 410
    type: ClassVar[str] = CURSOR_GONE
    title: ClassVar[str] = "Cursor below retention"

    def __init__(self, cursor: int, first: int) -> None:
        super().__init__(f"cursor {cursor} is below the retained chunks (from {first})")
        self.cursor = cursor
        self.first = first

    def detail(self) -> str:
        return (
            f"the chunks after cursor {self.cursor} are no longer kept; the oldest kept is "
            f"{self.first}: read the session from cursor {self.first - 1} or from its source"
        )

    def extensions(self) -> dict[str, Any]:
        return {"firstChunkId": self.first}


class InvalidCursorError(SessionError, ProblemError):
    """A cursor (``?cursor=`` or ``Last-Event-ID``) that is no cursor (422); the
    message says which and why."""

    status: ClassVar[int] = 422
    type: ClassVar[str] = INVALID_CURSOR
    title: ClassVar[str] = "Invalid cursor"


class CursorAheadError(SessionError, ProblemError):
    """``cursor`` is past ``last``, the greatest id its stream has sent: it is no
    cursor of this stream (422; never a ``204``, which would end an ``EventSource``
    for good while the stream may still run)."""

    status: ClassVar[int] = 422
    type: ClassVar[str] = CURSOR_AHEAD
    title: ClassVar[str] = "Cursor ahead of the stream"

    def __init__(self, cursor: int, last: int) -> None:
        super().__init__(
            f"cursor {cursor} is past this stream's last id ({last}): it is no cursor of "
            "this stream (read it from the start)"
        )
        self.cursor = cursor
        self.last = last

    def extensions(self) -> dict[str, Any]:
        return {"lastId": self.last}


class SessionEndedError(SessionError, ProblemError):
    """Session ``session_id`` has ended: it takes no more messages (409). ``state``
    and ``last_chunk_id``, where the raiser knows them, go into the problem."""

    status: ClassVar[int] = 409
    type: ClassVar[str] = SESSION_ENDED
    title: ClassVar[str] = "Session ended"

    def __init__(
        self, session_id: str, *, state: str | None = None, last_chunk_id: int | None = None
    ) -> None:
        super().__init__(f"session {session_id} has ended")
        self.state = state
        self.last_chunk_id = last_chunk_id

    def extensions(self) -> dict[str, Any]:
        known = {"state": self.state, "lastChunkId": self.last_chunk_id}
        return {name: value for name, value in known.items() if value is not None}


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


class SessionNotFoundError(SessionError, ProblemError, KeyError):
    """No session ``session_id`` (never created, or retired by retention; 404)."""

    status: ClassVar[int] = 404
    type: ClassVar[str] = NOT_FOUND
    title: ClassVar[str] = "Session not found"

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id

    def detail(self) -> str:
        return f"no session {self.session_id!r}"
