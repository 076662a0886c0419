"""The sessions role: durable sessions, runs that outlive their clients.

:class:`SessionService` (:mod:`.supervisor`: one nursery per session, restore, retire),
:class:`SessionBuffer` (:mod:`.buffer`: chunks by cursor, each session's stored once in
its Durable Stream at ``/v1/stream/sessions/{id}``; :class:`SessionRuns` lets another
role copy them), :class:`Session` (:mod:`.session`: state, reads,
message, interrupt, runs offered to live subscribers; the sessions never write a
socket), :class:`Follow` (:mod:`.follow`: one reader), and ``/sessions``
(:mod:`.routes`, framed by :mod:`.wire`; where a reader resumes: :mod:`.resume`, which
the chat's streams share); their metrics: :class:`SessionsCollector` (:mod:`.metrics`,
on the counts of :mod:`.counts`).
"""

from .api_description import SESSIONS_OPERATIONS
from .buffer import SESSION_STREAMS, Run, SessionBuffer, SessionRuns, split_chunks
from .errors import (
    CURSOR_AHEAD,
    CURSOR_GONE,
    INVALID_CURSOR,
    PERMISSION_ANSWERED,
    PERMISSION_NOT_FOUND,
    SESSION_ENDED,
    CursorAheadError,
    CursorGoneError,
    InvalidCursorError,
    PermissionAnsweredError,
    PermissionNotFoundError,
    SessionEndedError,
    SessionNotFoundError,
)
from .follow import CaughtUp, Chunks, Follow, KeepAlive, Subscribe
from .metrics import SessionsCollector
from .resume import request_cursor
from .routes import get_sessions, install_sessions
from .session import Session, SessionStatus
from .settings import SessionSettings
from .supervisor import RUNNER_LOST, SessionService, terminal_state

__all__ = [
    "CURSOR_AHEAD",
    "CURSOR_GONE",
    "INVALID_CURSOR",
    "PERMISSION_ANSWERED",
    "PERMISSION_NOT_FOUND",
    "RUNNER_LOST",
    "SESSIONS_OPERATIONS",
    "SESSION_ENDED",
    "SESSION_STREAMS",
    "CaughtUp",
    "Chunks",
    "CursorAheadError",
    "CursorGoneError",
    "Follow",
    "InvalidCursorError",
    "KeepAlive",
    "PermissionAnsweredError",
    "PermissionNotFoundError",
    "Run",
    "Session",
    "SessionBuffer",
    "SessionEndedError",
    "SessionNotFoundError",
    "SessionRuns",
    "SessionService",
    "SessionSettings",
    "SessionStatus",
    "SessionsCollector",
    "Subscribe",
    "get_sessions",
    "install_sessions",
    "request_cursor",
    "split_chunks",
    "terminal_state",
]
