"""The log mover: each open session followed and folded by exactly one replica, under
a fenced lease. The chat database's tables are the store's: the mover writes the
fences (and, if asked, a copy of the chunks) through its ``MovedChunks``
(:mod:`..store.moved_runs`) and leases sessions with its ``DatabaseLease``
(:mod:`..store.leases`) or with Redis.

- :mod:`.lease`: :class:`Lease` — ``DatabaseLease`` (embedded default) and
  :class:`RedisLease` (scale-out, ``--redis-url``), picked by :func:`open_lease`;
  :func:`check_redis` asks Redis once (``sandstream serve`` at start);
- :mod:`.redis_url`, :mod:`.redis_client`: the ``--redis-url`` (TLS included) and the
  coredis client on trio that :class:`RedisLease` speaks;
- :mod:`.sources`: :class:`EmbeddedSource` (in-process sessions) and
  :class:`RemoteSource` (a runner's WebSocket), chosen by :class:`SessionSources`;
- :mod:`.mover`: :class:`LogMover`, the sweep, claim, heartbeat, fold, move and settle;
- :mod:`.settle`: a chat turn's fold and settling (the chat's use of the mover is
  :class:`~sandstream.server.chat.turns.TurnMover`);
  :mod:`.permissions`: what a fold says of its permission requests, for push alerts.
"""

from sandstream.server.chat.model import (
    ChunkGapError,
    ChunkShapeError,
    FencedError,
    RedisAuthError,
    RedisConnectionError,
    RedisLeaseError,
    RedisReplyError,
    RunnerLostError,
    SourceError,
    SourceGoneError,
    SourceRefusedError,
)

from .lease import Lease, RedisLease, check_redis, open_lease
from .metrics import ChatTurnsCollector, MoverCollector
from .mover import (
    SESSION_LOST,
    Fold,
    LiveSessions,
    LogMover,
    MoveOutcome,
    NewFold,
    OnTerminal,
    SourceFor,
)
from .redis_url import parse_redis_url, tls_context
from .settle import TurnFold, TurnSettler, fold_chunks
from .sources import (
    EmbeddedSource,
    OpenSessionRef,
    Passed,
    RemoteSource,
    SessionSources,
    Source,
)

__all__ = [
    "SESSION_LOST",
    "ChatTurnsCollector",
    "ChunkGapError",
    "ChunkShapeError",
    "EmbeddedSource",
    "FencedError",
    "Fold",
    "Lease",
    "LiveSessions",
    "LogMover",
    "MoveOutcome",
    "MoverCollector",
    "NewFold",
    "OnTerminal",
    "OpenSessionRef",
    "Passed",
    "RedisAuthError",
    "RedisConnectionError",
    "RedisLease",
    "RedisLeaseError",
    "RedisReplyError",
    "RemoteSource",
    "RunnerLostError",
    "SessionSources",
    "Source",
    "SourceError",
    "SourceFor",
    "SourceGoneError",
    "SourceRefusedError",
    "TurnFold",
    "TurnSettler",
    "check_redis",
    "fold_chunks",
    "open_lease",
    "parse_redis_url",
    "tls_context",
]
