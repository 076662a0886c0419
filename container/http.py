"""HTTP plumbing shared by bootstrap, attachments, writeback and the openai agent.

Requests go over HTTP/1.1 with explicit timeouts. A model call is retried only after a
failure that proves it never reached the server (:class:`httpx.ConnectError`,
:class:`httpx.ConnectTimeout`): :func:`send_with_retries`. A workspace callback carries
an ``Idempotency-Key`` (:func:`idempotency_key`), so the workspace answers a repeat of
it as it answered the first: :func:`send_callback` also retries a transport failure
before any response and a ``502``/``503``/``504`` (a load balancer whose replica died),
with backoff, until ``callback_retry_sec`` have passed (docs/protocol.md, "Workspace
callbacks"). Cancellation propagates from both.
"""

from __future__ import annotations

import functools
import secrets
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import httpx
import trio

__all__ = [
    "IDEMPOTENCY_HEADER",
    "RETRYABLE_STATUSES",
    "HttpSettings",
    "body_excerpt",
    "idempotency_key",
    "new_client",
    "preload",
    "send_callback",
    "send_with_retries",
    "tls_context",
]

IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
RETRYABLE_STATUSES: Final = frozenset({502, 503, 504})
"""Answers of a proxy or load balancer that did not get a response from a replica."""

MAX_BACKOFF: Final = 5.0
"""The longest pause between two attempts of a callback."""

_RETRYABLE_ERRORS: Final = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)


@dataclass(frozen=True)
class HttpSettings:
    """Timeouts and retries: ``connect_retries`` for model calls, ``callback_retry_sec``
    (the time a workspace callback is retried for) for callbacks; ``retry_backoff`` is
    the first pause of both, doubling."""

    timeout: float = 30.0
    connect_retries: int = 3
    retry_backoff: float = 0.25
    callback_retry_sec: float = 60.0


def idempotency_key() -> str:
    """A fresh key for one callback, sent unchanged with each of its attempts."""
    return secrets.token_urlsafe(24)


def new_client(settings: HttpSettings) -> httpx.AsyncClient:
    """An HTTP/1.1 client with the settings' timeout and no redirects, verifying TLS
    with :func:`tls_context`."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(settings.timeout),
        follow_redirects=False,
        http2=False,
        verify=tls_context(),
    )


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (its CA bundle, or ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR``), made once per process: loading the CAs takes tens of ms."""
    return httpx.create_ssl_context()


def preload() -> None:
    """Load what a client's first request would load later (httpx's transport: httpcore,
    h11, the TLS context and its CA bundle; the IDNA codec), for a container started
    ahead of its turn. Nothing of it holds a connection."""
    "".encode("idna")
    new_client(HttpSettings())


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


async def send_callback(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    build: Callable[[], httpx.Request],
    **send_options: Any,
) -> httpx.Response:
    """Send the workspace callback ``build()`` makes, rebuilding it for each attempt.

    A callback that redeems a token must carry the same :data:`IDEMPOTENCY_HEADER` on
    every request ``build`` makes.
    A transport failure (no response: connect, read or write error, timeout, a
    connection closed before the status line) or a :data:`RETRYABLE_STATUSES` answer
    is tried again after a pause (``retry_backoff``, doubling, at most
    :data:`MAX_BACKOFF`) while the next attempt can start within
    ``callback_retry_sec`` of the first; then the last error propagates (or the last
    answer is returned). Other answers are returned at once, read unless
    ``stream=True`` (then the caller reads and closes it).
    """
    deadline = trio.current_time() + settings.callback_retry_sec
    pause = settings.retry_backoff
    while True:
        try:
            response = await client.send(build(), **send_options)
        except _RETRYABLE_ERRORS:
            if trio.current_time() + pause > deadline:
                raise
        else:
            if response.status_code not in RETRYABLE_STATUSES or (
                trio.current_time() + pause > deadline
            ):
                if not send_options.get("stream"):
                    await response.aread()
                return response
            await response.aclose()
        await trio.sleep(pause)
        pause = min(pause * 2, MAX_BACKOFF)


def body_excerpt(response: httpx.Response, limit: int = 300) -> str:
    """The start of a response body, for error messages."""
    text = response.content[:limit].decode("utf-8", "replace").strip()
    return text.replace("\n", " ")
