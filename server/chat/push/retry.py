"""Send one push request again while the service is overloaded or unreachable.

:func:`send_with_retries` calls ``send_once`` up to ``attempts`` times: again after a
``429``, a ``5xx`` or an :class:`httpx.TransportError`, waiting the answer's
``Retry-After`` (seconds or an HTTP-date) or else an exponential backoff with jitter,
never longer than ``max_delay``. Any other answer is returned as it is; when the
attempts run out it raises :class:`PushUnavailableError`. Cancellation stops it at
once, in a request or in a wait.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
import trio

from .errors import PushUnavailableError

__all__ = ["send_with_retries"]


async def send_with_retries(
    send_once: Callable[[], Awaitable[httpx.Response]],
    *,
    attempts: int,
    first_delay: float,
    max_delay: float,
) -> httpx.Response:
    """The first answer of ``send_once`` that is neither ``429`` nor ``5xx``."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    backoff = first_delay
    for attempt in range(1, attempts + 1):
        try:
            response = await send_once()
        except httpx.TransportError as exc:
            failure, asked = f"{type(exc).__name__}: {exc}", None
        else:
            if response.status_code != 429 and response.status_code < 500:
                return response
            failure = f"HTTP {response.status_code}"
            asked = _retry_after(response.headers.get("retry-after"))
        if attempt == attempts:
            break
        await trio.sleep(
            min(max_delay, asked if asked is not None else backoff * random.uniform(0.5, 1.0))
        )
        backoff = min(max_delay, backoff * 2)
    raise PushUnavailableError(
        f"the push service failed {attempts} attempt(s), the last: {failure}"
    )


def _retry_after(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` value asks to wait (``None``: absent or unreadable)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
