"""The log mover (seed 001, issue 11): each live session's chunks moved into the chat
database by exactly one replica, under a fenced lease.

- :mod:`.lease`: :class:`Lease` — :class:`SqliteLease` (embedded default) and
  :class:`RedisLease` (scale-out, ``--redis-url``), picked by :func:`open_lease`;
- :mod:`.resp`: the RESP2 client on trio that :class:`RedisLease` speaks;
- :mod:`.sink`: :class:`MovedChunks`, the fenced, idempotent store of moved chunks
  (bytes, :class:`Batch`, or runs copied from an in-process session buffer,
  :class:`StoredRuns`);
- :mod:`.sources`: :class:`EmbeddedSource` (in-process sessions) and
  :class:`RemoteSource` (a runner's WebSocket), chosen by :class:`SessionSources`;
- :mod:`.mover`: :class:`LogMover`, the sweep, claim, heartbeat, move and settle.
"""

from ..errors import (
    ChunkGapError,
    ChunkShapeError,
    FencedError,
    RedisConnectionError,
    RedisReplyError,
    RespError,
    RespProtocolError,
    SourceError,
    SourceGoneError,
    SourceRefusedError,
    StoredRunsMissingError,
)
from .lease import Lease, RedisLease, SqliteLease, open_lease
from .mover import SESSION_LOST, LiveSessions, LogMover, MoveOutcome, OnTerminal, SourceFor
from .resp import RedisClient
from .sink import Batch, MovedChunks, StoredRuns
from .sources import EmbeddedSource, LiveSessionRef, RemoteSource, SessionSources, Source

__all__ = [
    "SESSION_LOST",
    "Batch",
    "ChunkGapError",
    "ChunkShapeError",
    "EmbeddedSource",
    "FencedError",
    "Lease",
    "LiveSessionRef",
    "LiveSessions",
    "LogMover",
    "MoveOutcome",
    "MovedChunks",
    "OnTerminal",
    "RedisClient",
    "RedisConnectionError",
    "RedisLease",
    "RedisReplyError",
    "RemoteSource",
    "RespError",
    "RespProtocolError",
    "SessionSources",
    "Source",
    "SourceError",
    "SourceFor",
    "SourceGoneError",
    "SourceRefusedError",
    "SqliteLease",
    "StoredRuns",
    "StoredRunsMissingError",
    "open_lease",
]
