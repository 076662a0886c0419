"""Who owns a session's persistence: a lease per session, with a fencing generation.

A :class:`Lease` grants one owner (a chat replica) a session for ``ttl`` seconds, with a
generation strictly greater than every one before for that session; the generation goes
with every write of the moved chunks, so an owner that lost its lease is refused once a
newer one claimed. A lease whose ``ttl`` passed is gone, claimed or not.
:func:`open_lease` picks :class:`RedisLease` or the store's
:class:`~sandstream.server.chat.store.leases.DatabaseLease`.

Every call raises what its store raises when it cannot be reached (:class:`sqlite3.Error`,
:class:`~.resp.RespError`): the outcome is then unknown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, Protocol

from ..errors import RespProtocolError
from ..store.leases import ttl_ms
from .resp import RedisClient

__all__ = ["Lease", "RedisLease", "open_lease", "redis_keys"]


class Lease(Protocol):
    """A lease per session id; see the module docstring."""

    async def acquire(self, session_id: str, owner: str, ttl: float) -> int | None:
        """Take the session for ``ttl`` s: a new fencing generation (strictly greater
        than every one before for this session), or None while another live lease
        (even ``owner``'s own) holds it."""
        ...

    async def renew(self, session_id: str, owner: str, generation: int, ttl: float) -> bool:
        """Extend ``owner``'s lease of ``generation`` to ``ttl`` s from now; False if it
        is not held any more (expired, released, or another generation holds it)."""
        ...

    async def release(self, session_id: str, owner: str, generation: int) -> None:
        """Give the lease up if ``owner`` still holds ``generation``; else do nothing."""
        ...


_ACQUIRE: Final = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false
"""
"""Claim: the owner key ``NX`` and a new generation, at once (no claim without one)."""

_HOLDS: Final = "redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2]"
"""The owner key is ``owner``'s, and the generation its claim was given is the latest."""

_RENEW: Final = f"""
if {_HOLDS} then
  return redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 0
"""

_RELEASE: Final = f"""
if {_HOLDS} then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def redis_keys(session_id: str) -> tuple[str, str]:
    """The Redis keys of a session's lease: its owner, its generation counter."""
    tag = f"sandbox:{{{session_id}}}"
    return f"{tag}:owner", f"{tag}:generation"


class RedisLease:
    """:class:`Lease` on a Redis server: the owner key ``sandbox:{<id>}:owner`` set
    ``NX PX <ttl>`` and the counter ``sandbox:{<id>}:generation`` incremented, in one
    Lua script (the braces keep both keys in one Redis Cluster slot); expiry on the
    Redis server's clock. The counter is never deleted, so generations only grow.

    A claim sets the owner key and increments the counter in one script, so the owner
    key, while it exists, belongs to the counter's latest generation: renew and release
    check both, and a replica that lost the lease and claimed it again under a newer
    generation cannot renew or release the old one.
    """

    def __init__(self, redis: RedisClient) -> None:
        self.redis = redis

    async def acquire(self, session_id: str, owner: str, ttl: float) -> int | None:
        keys = redis_keys(session_id)
        reply = await self.redis.execute("EVAL", _ACQUIRE, 2, *keys, owner, ttl_ms(ttl))
        if reply is None:
            return None
        if not isinstance(reply, int):
            raise RespProtocolError(f"the lease script answered {reply!r}, not a generation")
        return reply

    async def renew(self, session_id: str, owner: str, generation: int, ttl: float) -> bool:
        keys = redis_keys(session_id)
        reply = await self.redis.execute("EVAL", _RENEW, 2, *keys, owner, generation, ttl_ms(ttl))
        return reply == 1

    async def release(self, session_id: str, owner: str, generation: int) -> None:
        keys = redis_keys(session_id)
        await self.redis.execute("EVAL", _RELEASE, 2, *keys, owner, generation)


@asynccontextmanager
async def open_lease(redis_url: str | None, database_lease: Lease) -> AsyncIterator[Lease]:
    """The lease the log mover uses: :class:`RedisLease` on ``redis_url`` (the
    ``--redis-url`` flag), else ``database_lease`` (the chat store's
    :class:`~sandstream.server.chat.store.leases.DatabaseLease`).

    Raises :class:`ValueError` for a malformed Redis URL (before anything connects);
    Redis is first reached by the first lease call. The Redis connection is closed
    when the block ends.
    """
    if redis_url is None:
        yield database_lease
        return
    async with RedisClient(redis_url) as redis:
        yield RedisLease(redis)
