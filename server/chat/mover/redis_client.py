"""The log mover's connection to Redis: a coredis client on trio, and its errors.

:func:`open_redis` opens a :class:`coredis.Redis` (RESP3, anyio, so it runs on trio's
own event loop) on the address of a ``--redis-url`` (:mod:`.redis_url`); nothing is
sent until the first command. A command is never retried: when a connection breaks
its outcome is unknown, and the lease calls again at its next heartbeat or sweep.
:func:`redis_errors` turns coredis's exceptions into the chat's
(:class:`~sandstream.server.chat.model.RedisLeaseError` and its kinds), each naming the server,
never the password.

Cancellation: a command cancelled in flight is dropped by coredis (its reply is never
taken for another command's); it may or may not have run. Leaving :func:`open_redis`
closes every connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Final

import coredis
import trio
from coredis.exceptions import (
    AuthenticationError,
    AuthenticationRequiredError,
    AuthorizationError,
    RedisError,
)
from coredis.exceptions import ConnectionError as CoredisConnectionError
from coredis.retry import NoRetryPolicy

from sandstream.server.chat.model import RedisAuthError, RedisConnectionError, RedisReplyError

from .redis_url import RedisAddress, parse_redis_url, tls_context

__all__ = ["CONNECT_TIMEOUT", "REPLY_TIMEOUT", "open_redis", "redis_errors"]

CONNECT_TIMEOUT: Final = 5.0
"""Seconds to connect (TCP, TLS, ``HELLO``/``AUTH``/``SELECT``) before the command fails."""

REPLY_TIMEOUT: Final = 10.0
"""Seconds a reply may take before the command fails (a frozen connection does not
hold a claim up forever)."""


@asynccontextmanager
async def open_redis(url: str) -> AsyncIterator[tuple[coredis.Redis[bytes], RedisAddress]]:
    """A coredis client on ``url`` and its parsed address, for the block.

    Raises :class:`ValueError` for a malformed URL or TLS files that cannot be used
    (read in a worker thread), before anything connects. An exception of the block
    comes out as itself, not wrapped in the client's exception group.
    """
    address = parse_redis_url(url)
    context = None
    if address.tls is not None:
        context = await trio.to_thread.run_sync(tls_context, address.tls)
    client: coredis.Redis[bytes] = coredis.Redis(
        address.host,
        address.port,
        address.db,
        username=address.username,
        password=address.password,
        ssl_context=context,
        connect_timeout=CONNECT_TIMEOUT,
        stream_timeout=REPLY_TIMEOUT,
        retry_policy=NoRetryPolicy(),
    )
    try:
        async with client:
            yield client, address
    except BaseExceptionGroup as group:
        sole = _sole_exception(group)
        if sole is None:
            raise
        raise sole from None


def _sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception in ``group`` (nested groups of one), else ``None``."""
    if len(group.exceptions) != 1:
        return None
    (inner,) = group.exceptions
    if isinstance(inner, BaseExceptionGroup):
        return _sole_exception(inner)
    return inner


@contextmanager
def redis_errors(address: RedisAddress) -> Iterator[None]:
    """Raise coredis's errors in the block as the chat's: :class:`RedisAuthError` (the
    credentials), :class:`RedisConnectionError` (not reached, broken, timed out, TLS
    refused) or :class:`RedisReplyError` (an error reply)."""
    try:
        yield
    except AuthenticationRequiredError as exc:
        raise RedisAuthError(
            f"Redis at {address} requires a password, and the Redis URL gives none: {exc}"
        ) from exc
    except (AuthenticationError, AuthorizationError) as exc:
        raise RedisAuthError(
            f"Redis at {address} refused the Redis URL's user or password: {exc}"
        ) from exc
    except (CoredisConnectionError, TimeoutError, OSError) as exc:
        why = repr(exc) if exc.__cause__ is None else f"{exc!r}, from {exc.__cause__!r}"
        raise RedisConnectionError(f"Redis at {address}: {why}") from exc
    except RedisError as exc:
        raise RedisReplyError(f"Redis at {address} answered: {exc}") from exc
