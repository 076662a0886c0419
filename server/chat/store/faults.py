"""Which failures of the chat database and of Redis are transient, and how a task
that meets one waits and tries again.

A failure is **transient** when asking again later may succeed: PostgreSQL not
reached, restarting or its connection lost (:class:`psycopg.OperationalError`, which
the pool's :class:`psycopg_pool.PoolTimeout` is), Redis not reached, broken or timed
out (:class:`~sandstream.server.chat.model.RedisConnectionError`), SQLite's write lock
held by another process past its busy timeout (:class:`sqlite3.OperationalError` whose
error code is ``SQLITE_BUSY`` or ``SQLITE_LOCKED``). They are told apart by type and
error code, never by their text. Any other error is a bug or a refusal that asking
again will not change.

:func:`retry_transient` runs a call until it returns, waiting a :class:`Backoff`
between transient failures (each logged as one warning line, no traceback); other
errors propagate at once. :func:`report_failure` logs a background task's failure:
a transient one as a warning line, any other with its traceback. Cancellation: a
wait ends at once.
"""

from __future__ import annotations

import logging
import random
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import psycopg
import psycopg_pool
import trio

from sandstream.server.chat.model import RedisConnectionError

__all__ = ["TRANSIENT_TYPES", "Backoff", "is_transient", "report_failure", "retry_transient"]

T = TypeVar("T")

TRANSIENT_TYPES: Final = (psycopg.OperationalError, psycopg_pool.PoolTimeout, RedisConnectionError)
"""The exception types that are transient whatever they hold (SQLite's are by code)."""

_SQLITE_BUSY_CODES: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure that asking again later may cure (module docstring)."""
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_BUSY_CODES  # extended codes too
    return isinstance(exc, TRANSIENT_TYPES)


class Backoff:
    """Delays that double from ``first`` up to ``cap`` seconds, each drawn between
    half and all of its value (replicas that failed together do not retry together).
    :meth:`reset` after a success."""

    def __init__(self, first: float = 0.2, cap: float = 5.0) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"a backoff needs 0 < first <= cap, got {first} and {cap}")
        self.first = first
        self.cap = cap
        self._next = first

    def next_delay(self) -> float:
        """The next delay (seconds), then the one after it doubles (at most ``cap``)."""
        delay = self._next
        self._next = min(delay * 2, self.cap)
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        """Start again from ``first``."""
        self._next = self.first


async def retry_transient(
    call: Callable[[], Awaitable[T]],
    what: str,
    logger: logging.Logger,
    *,
    backoff: Backoff | None = None,
) -> T:
    """``await call()`` until it returns; after a transient failure, log ``what``
    failed (one warning line) and wait the backoff's next delay (default
    :class:`Backoff`'s). Raises what is not transient at once; the caller bounds the
    whole (a cancel scope, a lease that ends)."""
    backoff = backoff or Backoff()
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = backoff.next_delay()
            logger.warning("%s failed (%r); trying again in %.1f s", what, exc, delay)
            await trio.sleep(delay)


def report_failure(logger: logging.Logger, what: str, exc: BaseException) -> None:
    """Log that ``what`` failed with ``exc``: a transient failure as a warning line,
    any other error with its traceback (``exc`` must be the one being handled)."""
    if is_transient(exc):
        logger.warning("%s failed (%r); it is tried again", what, exc)
    else:
        logger.exception("%s failed; it is tried again", what)
