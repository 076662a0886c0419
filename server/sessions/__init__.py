"""The sessions role: durable sessions (seed 001) — a run that outlives its clients.

- :class:`SessionService` (:mod:`.service`) creates sessions on the runner, runs one
  nursery per session (container, upstream read, append to the buffer), restores
  sessions after a restart and retires old ones;
- :class:`SessionBuffer` (:mod:`.buffer`) is the SQLite buffer of chunks by cursor;
- :class:`Session` (:mod:`.session`) is one session's state, reads by cursor, message
  and interrupt, and hands its new runs to caught-up readers (:class:`LiveSubscriber`:
  the sessions never write a socket); :class:`Follow` (:mod:`.follow`) one reader from
  a cursor;
- :mod:`.routes` mounts ``/sessions`` (SSE, NDJSON, WebSocket), :mod:`.wire` frames it.
"""

from .buffer import Run, SessionBuffer
from .errors import CursorGoneError, SessionEndedError, SessionNotFoundError
from .follow import CaughtUp, Chunks, Follow, KeepAlive, Subscribe
from .routes import get_sessions, install_sessions
from .service import RUNNER_LOST, SessionService
from .session import LiveSubscriber, Session, SessionStatus
from .settings import SessionSettings

__all__ = [
    "RUNNER_LOST",
    "CaughtUp",
    "Chunks",
    "CursorGoneError",
    "Follow",
    "KeepAlive",
    "LiveSubscriber",
    "Run",
    "Session",
    "SessionBuffer",
    "SessionEndedError",
    "SessionNotFoundError",
    "SessionService",
    "SessionSettings",
    "SessionStatus",
    "Subscribe",
    "get_sessions",
    "install_sessions",
]
