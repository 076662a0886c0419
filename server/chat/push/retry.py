"""Retries of one push request with exponential backoff, shared by the push senders.

:func:`send_with_retries` calls a sender's "send once" coroutine until its answer is
not worth another try: a 429 or 5xx answer, or a transport error before the request
reached the service whole (connect, pool, write), is tried again; any other answer is
returned as it is, for the sender to read. A request that may have reached the
service and got no answer (a read that failed or timed out, the total time running
out during it) is not sent again: :class:`PushInDoubtError`, since a push must not be
shown twice. The wait before try *n* + 1 is the backoff (``first_delay`` doubled
each time, at most ``max_delay``, its upper half random so that many senders do not
come back together), and never less than the answer's ``Retry-After`` (seconds or an
HTTP date). Bounded: at most ``attempts`` tries within ``total`` seconds, the tries
themselves included; a wait that would end past ``total`` gives up at once. Giving up
raises :class:`PushUnavailableError` (with the last ``Retry-After``, for a later try).
:meth:`RetryPolicy.backoff` also spaces the push outbox's later attempts.

Cancellation stops it at once, in a try or in a wait; nothing is left to undo. A policy
with impossible bounds raises :class:`ValueError` when it is made.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import httpx
import trio

from .errors import PushInDoubtError, PushUnavailableError

__all__ = ["RetryPolicy", "is_retryable", "retry_after", "send_with_retries"]

log = logging.getLogger("sandstream.chat.push")

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.WriteError)
"""Transport errors of a request that did not reach the push service whole: safe to send
again. Any other (a read that failed or timed out, a broken answer) may have followed a
push the service took."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long :func:`send_with_retries` tries (seconds)."""

    attempts: int = 5
    first_delay: float = 1.0
    max_delay: float = 30.0
    total: float = 120.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("a retry policy makes at least one attempt")
        if not 0 <= self.first_delay <= self.max_delay:
            raise ValueError("a retry policy needs 0 <= first_delay <= max_delay")
        if self.total <= 0:
            raise ValueError("a retry policy needs a positive total time")

    def backoff(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1: the second attempt), jittered."""
        ceiling = min(self.max_delay, self.first_delay * 2.0 ** (retry - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def is_retryable(status: int) -> bool:
    """Whether an answer with ``status`` is worth another try (429 and 5xx)."""
    return status == 429 or 500 <= status <= 599


def retry_after(response: httpx.Response, now: float) -> float | None:
    """The seconds ``response``'s ``Retry-After`` asks to wait from ``now`` (Unix
    time), or ``None`` when it has none or it is neither delay-seconds nor an HTTP
    date. A date in the past is a wait of 0."""
    value = response.headers.get("retry-after", "").strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


async def send_with_retries(
    send_once: Callable[[], Awaitable[httpx.Response]],
    policy: RetryPolicy | None = None,
) -> httpx.Response:
    """Call ``send_once`` until its answer is not retryable, and return that answer.

    ``send_once`` sends the request once and returns the whole response (its body
    read); it may raise :class:`httpx.TransportError`. Raises
    :class:`PushUnavailableError` when the attempts or the total time of ``policy``
    (default :class:`RetryPolicy`) run out on retryable answers or errors before the
    request was sent whole, and :class:`PushInDoubtError` at once when a request may
    have reached the service and no answer came.
    """
    policy = policy or RetryPolicy()
    deadline = trio.current_time() + policy.total
    for attempt in range(1, policy.attempts + 1):
        outcome = await _attempt(send_once, deadline, attempt)
        if isinstance(outcome, httpx.Response):
            if not is_retryable(outcome.status_code):
                return outcome
            status: int | None = outcome.status_code
            failure = f"answered {outcome.status_code}"
            asked = retry_after(outcome, time.time())
        else:
            status, failure, asked = None, outcome, None
        if attempt == policy.attempts:
            break
        wait = max(policy.backoff(attempt), asked or 0.0)
        if trio.current_time() + wait >= deadline:
            raise PushUnavailableError(
                f"the push service {failure} (attempt {attempt}), and no time is left "
                f"for another within {policy.total:g} s (the next in {wait:.1f} s)",
                status=status,
                attempts=attempt,
                retry_after=asked,
            )
        log.info("push: the push service %s; attempt %d in %.1f s", failure, attempt + 1, wait)
        await trio.sleep(wait)
    raise PushUnavailableError(
        f"the push service {failure} after {policy.attempts} attempts",
        status=status,
        attempts=policy.attempts,
        retry_after=asked,
    )


async def _attempt(
    send_once: Callable[[], Awaitable[httpx.Response]], deadline: float, attempt: int
) -> httpx.Response | str:
    """``send_once``'s answer by ``deadline``, or what kept the request from the service
    (as text); raises :class:`PushInDoubtError` when it may have reached it."""
    with trio.move_on_at(deadline):
        try:
            return await send_once()
        except _NOT_SENT as error:
            return f"could not be reached ({type(error).__name__}: {error})"
        except httpx.TransportError as error:
            raise PushInDoubtError(
                f"the push service's answer was lost ({type(error).__name__}: {error}) "
                f"at attempt {attempt}: it may have taken the push"
            ) from None
    raise PushInDoubtError(
        f"the push service did not answer in time (attempt {attempt}): it may have taken the push"
    )
