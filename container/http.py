"""HTTP plumbing shared by bootstrap, writeback and the openai agent.

Requests go over HTTP/1.1 with explicit timeouts. Only failures that prove the request
never reached the server (:class:`httpx.ConnectError`, :class:`httpx.ConnectTimeout`)
are retried: a one-time token that may have been received is never sent twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import trio

__all__ = ["HttpSettings", "body_excerpt", "new_client", "send_with_retries"]


@dataclass(frozen=True)
class HttpSettings:
    """Timeouts and connect retries for workspace and model calls."""

    timeout: float = 30.0
    connect_retries: int = 3
    retry_backoff: float = 0.25


def new_client(settings: HttpSettings) -> httpx.AsyncClient:
    """An HTTP/1.1 client with the settings' timeout and no redirects."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(settings.timeout),
        follow_redirects=False,
        http2=False,
    )


async def send_with_retries(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    build: Callable[[], httpx.Request],
    **send_options: Any,
) -> httpx.Response:
    """Send the request ``build()`` makes, rebuilding it for each retry.

    Retries connection failures up to ``settings.connect_retries`` times with
    exponential backoff, then re-raises the last one. Other :class:`httpx.HTTPError`
    propagate at once. The response body is read, unless ``stream=True`` is passed
    (then the caller reads and closes it). Cancellation propagates.
    """
    attempt = 0
    while True:
        try:
            response = await client.send(build(), **send_options)
            if not send_options.get("stream"):
                await response.aread()
            return response
        except (httpx.ConnectError, httpx.ConnectTimeout):
            if attempt >= settings.connect_retries:
                raise
            await trio.sleep(settings.retry_backoff * (2**attempt))
            attempt += 1


def body_excerpt(response: httpx.Response, limit: int = 300) -> str:
    """The start of a response body, for error messages."""
    text = response.content[:limit].decode("utf-8", "replace").strip()
    return text.replace("\n", " ")
