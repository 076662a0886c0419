"""Who owns a session's persistence: a lease per session, with a fencing generation.

A :class:`Lease` grants one owner (a chat replica) a session for ``ttl`` seconds, with a
generation strictly greater than every one before for that session; the generation goes
with every write of the moved chunks, so an owner that lost its lease is refused once a
newer one claimed. A lease whose ``ttl`` passed is gone, claimed or not.
:func:`open_lease` picks :class:`RedisLease` or the store's
:class:`~sandstream.server.chat.store.DatabaseLease`.

Every call raises what its store raises when it cannot be reached or answers nonsense
(:class:`sqlite3.Error`, :class:`~sandstream.server.chat.model.RedisLeaseError`): the outcome is
then unknown, and the mover calls again at its next heartbeat or sweep. No content of Redis (keys
deleted, counters at their maximum, values of the wrong type or garbage) can stop a claim for longer
than the ttl of a lease that was really held: see
:class:`RedisLease`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final, Protocol

import coredis

from sandstream.server.chat.model import RedisReplyError
from sandstream.server.chat.store import Database, DatabaseLease, MovedChunks, ttl_ms
from sandstream.server.databases import OperationTimes

from .redis_client import open_redis, redis_errors
from .redis_url import RedisAddress

__all__ = [
    "MAX_COUNTER_DIGITS",
    "Lease",
    "RedisLease",
    "check_redis",
    "open_lease",
    "redis_keys",
]


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


MAX_COUNTER_DIGITS: Final = 15
"""A generation counter in Redis longer than this many digits is not one the leases
wrote (it would take 10^15 claims): it is ignored like garbage. Below it Lua's numbers
(doubles) count exactly."""

_ACQUIRE: Final = f"""
local ttl = tonumber(ARGV[2])
local held = redis.call('TYPE', KEYS[1])['ok']
if held ~= 'none' then
  local left = redis.call('PTTL', KEYS[1])
  if held == 'string' and left > 0 and left <= ttl then
    return false
  end
end
local last = tonumber(ARGV[3])
if redis.call('TYPE', KEYS[2])['ok'] == 'string' then
  local text = redis.call('GET', KEYS[2])
  if string.match(text, '^%d+$') and string.len(text) <= {MAX_COUNTER_DIGITS} then
    last = math.max(last, tonumber(text))
  end
end
local generation = string.format('%d', last + 1)
redis.call('SET', KEYS[2], generation)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return tonumber(generation)
"""
"""Claim: unless a lease holds the owner key, set it (``PX ttl``) and store a new
generation: one above the larger of the counter and the session's fence in the chat
database (``ARGV[3]``). An owner key that no lease could have left (not a string, no
expiry, or longer than this ttl) does not hold; a counter that is not a number the
leases wrote (wrong type, garbage, more than :data:`MAX_COUNTER_DIGITS` digits) counts
as the fence. Both keys are overwritten, whatever their type."""

_HOLDS: Final = """
local function holds()
  return redis.call('TYPE', KEYS[1])['ok'] == 'string'
    and redis.call('TYPE', KEYS[2])['ok'] == 'string'
    and redis.call('GET', KEYS[1]) == ARGV[1]
    and redis.call('GET', KEYS[2]) == ARGV[2]
end
"""
"""The owner key is ``owner``'s, and the generation its claim was given is the latest
(keys of another type simply do not hold)."""

_RENEW: Final = f"""{_HOLDS}
if holds() then
  return redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 0
"""

_RELEASE: Final = f"""{_HOLDS}
if holds() then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

FenceOf = Callable[[str], Awaitable[int]]
"""The session's fence in the chat database (:meth:`MovedChunks.generation`)."""


def redis_keys(session_id: str) -> tuple[str, str]:
    """The Redis keys of a session's lease: its owner, its generation counter."""
    tag = f"sandbox:{{{session_id}}}"
    return f"{tag}:owner", f"{tag}:generation"


class RedisLease:
    """:class:`Lease` on a Redis server: the owner key ``sandbox:{<id>}:owner`` set
    ``PX <ttl>`` unless a lease holds it, and the counter ``sandbox:{<id>}:generation``
    raised, in one Lua script (the braces keep both keys in one Redis Cluster slot);
    expiry on the Redis server's clock.

    A claim sets the owner key and the counter in one script, so the owner key, while
    it exists, belongs to the counter's latest generation: renew and release check
    both, and a replica that lost the lease and claimed it again under a newer
    generation cannot renew or release the old one.

    Redis is not trusted to keep the generations: each claim reads the session's fence
    from the chat database (``fence_of``) and its generation is above it, whatever
    the counter holds (deleted by a restart without persistence, set to 2^63-1, of
    another type). A reply that is not such a generation raises
    :class:`~sandstream.server.chat.model.RedisReplyError` (a failed claim: the next sweep claims
    again).
    """

    def __init__(
        self, redis: coredis.Redis[bytes], address: RedisAddress, fence_of: FenceOf
    ) -> None:
        self.redis = redis
        self.address = address
        self.fence_of = fence_of
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self.operations = OperationTimes("redis")
        """Its calls' times and failures (for /metrics)."""

    async def acquire(self, session_id: str, owner: str, ttl: float) -> int | None:
        lease_ms = ttl_ms(ttl)
        fence = await self.fence_of(session_id)
        with self.operations.timed("acquire"), redis_errors(self.address):
            reply: object = await self._acquire(
                keys=redis_keys(session_id), args=(owner, lease_ms, fence)
            )
        if reply is None:
            return None
        if not isinstance(reply, int) or isinstance(reply, bool) or reply <= fence:
            raise RedisReplyError(
                f"Redis at {self.address}: the lease script answered {reply!r}, "
                f"not a generation above the session's fence {fence}"
            )
        return reply

    async def renew(self, session_id: str, owner: str, generation: int, ttl: float) -> bool:
        lease_ms = ttl_ms(ttl)
        with self.operations.timed("renew"), redis_errors(self.address):
            reply: object = await self._renew(
                keys=redis_keys(session_id), args=(owner, generation, lease_ms)
            )
        return reply == 1

    async def release(self, session_id: str, owner: str, generation: int) -> None:
        with self.operations.timed("release"), redis_errors(self.address):
            await self._release(keys=redis_keys(session_id), args=(owner, generation))

    async def ping(self) -> None:
        """Return once Redis answers ``PING`` (with the URL's credentials). Raises
        :class:`~sandstream.server.chat.model.RedisLeaseError` and its kinds."""
        with self.operations.timed("ping"), redis_errors(self.address):
            await self.redis.ping()


@asynccontextmanager
async def open_lease(redis_url: str | None, db: Database) -> AsyncIterator[Lease]:
    """The lease the log mover uses: :class:`RedisLease` on ``redis_url`` (the
    ``--redis-url`` flag), its claims fenced by the chat database ``db``'s fences, else
    a :class:`~sandstream.server.chat.store.DatabaseLease` on ``db``.

    Raises :class:`ValueError` for a malformed Redis URL or TLS files that cannot be
    used (before anything connects); Redis is first reached by the first lease call.
    The Redis connections are closed when the block ends.
    """
    if redis_url is None:
        yield DatabaseLease(db)
        return
    async with open_redis(redis_url) as (redis, address):
        yield RedisLease(redis, address, MovedChunks(db).generation)


async def check_redis(redis_url: str) -> None:
    """Return once Redis at ``redis_url`` answers ``PING`` with the URL's credentials
    (``sandstream serve`` asks before it listens). Raises :class:`ValueError` for a
    malformed URL, :class:`~sandstream.server.chat.model.RedisLeaseError` and its kinds
    when Redis is not reached (within its connect timeout) or refuses."""
    async with open_redis(redis_url) as (redis, address):
        with redis_errors(address):
            await redis.ping()
