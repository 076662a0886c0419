"""The log mover: each live session's chunks moved into the chat database by exactly
one replica, under a fenced lease. The chat database's tables are the store's: the
mover writes the chunks through its ``MovedChunks`` (:mod:`..store.moved_runs`) and
leases them with its ``DatabaseLease`` (:mod:`..store.leases`) or with Redis.

- :mod:`.lease`: :class:`Lease` — ``DatabaseLease`` (embedded default) and
  :class:`RedisLease` (scale-out, ``--redis-url``), picked by :func:`open_lease`;
- :mod:`.redis_url`, :mod:`.redis_client`: the ``--redis-url`` (TLS included) and the
  coredis client on trio that :class:`RedisLease` speaks;
- :mod:`.sources`: :class:`EmbeddedSource` (in-process sessions) and
  :class:`RemoteSource` (a runner's WebSocket), chosen by :class:`SessionSources`;
- :mod:`.mover`: :class:`LogMover`, the sweep, claim, heartbeat, move and settle.
"""

from ..errors import (
    ChunkGapError,
    ChunkShapeError,
    FencedError,
    RedisAuthError,
    RedisConnectionError,
    RedisLeaseError,
    RedisReplyError,
    SourceError,
    SourceGoneError,
    SourceRefusedError,
    StoredRunsMissingError,
)
from .lease import Lease, RedisLease, open_lease
from .mover import SESSION_LOST, LiveSessions, LogMover, MoveOutcome, OnTerminal, SourceFor
from .sources import EmbeddedSource, LiveSessionRef, RemoteSource, SessionSources, Source

__all__ = [
    "SESSION_LOST",
    "ChunkGapError",
    "ChunkShapeError",
    "EmbeddedSource",
    "FencedError",
    "Lease",
    "LiveSessionRef",
    "LiveSessions",
    "LogMover",
    "MoveOutcome",
    "OnTerminal",
    "RedisAuthError",
    "RedisConnectionError",
    "RedisLease",
    "RedisLeaseError",
    "RedisReplyError",
    "RemoteSource",
    "SessionSources",
    "Source",
    "SourceError",
    "SourceFor",
    "SourceGoneError",
    "SourceRefusedError",
    "StoredRunsMissingError",
    "open_lease",
]
