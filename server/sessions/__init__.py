"""The sessions role: durable sessions (seed 001) — a run that outlives its clients.

- :class:`SessionService` (:mod:`.service`) creates sessions on the runner, runs one
  nursery per session (container, upstream read, append to the buffer), restores
  sessions after a restart and retires old ones; :func:`terminal_state` is the state
  a session ends in after a given last chunk;
- :class:`SessionBuffer` (:mod:`.buffer`) is the SQLite buffer of chunks by cursor;
  :class:`SessionRuns` (:attr:`Session.stored_runs`) lets another role's SQLite
  database copy a session's stored runs inside SQLite (:class:`AttachedRuns`), its
  file and schema unknown to it; :func:`split_chunks` cuts a run into its chunks;
- :class:`Session` (:mod:`.session`) is one session's state, reads by cursor, message
  and interrupt, and hands its new runs to caught-up readers (:class:`LiveSubscriber`:
  the sessions never write a socket); :class:`Follow` (:mod:`.follow`) one reader from
  a cursor;
- :mod:`.routes` mounts ``/sessions`` (SSE, NDJSON, WebSocket), :mod:`.wire` frames it.
"""

from .buffer import AttachedRuns, Run, SessionBuffer, SessionRuns, split_chunks
from .errors import CursorGoneError, SessionEndedError, SessionNotFoundError
from .follow import CaughtUp, Chunks, Follow, KeepAlive, Subscribe
from .routes import get_sessions, install_sessions
from .service import RUNNER_LOST, SessionService, terminal_state
from .session import LiveSubscriber, Session, SessionStatus
from .settings import SessionSettings

__all__ = [
    "RUNNER_LOST",
    "AttachedRuns",
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
    "SessionRuns",
    "SessionService",
    "SessionSettings",
    "SessionStatus",
    "Subscribe",
    "get_sessions",
    "install_sessions",
    "split_chunks",
    "terminal_state",
]
