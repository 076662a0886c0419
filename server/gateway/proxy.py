"""One proxied call: the client's request streamed to the provider with the real key,
the provider's answer streamed back byte for byte, observers told as it passes.

:func:`forward` never buffers: each chunk of the request body goes upstream as the
client sends it, each chunk of the answer goes to the client as the provider sends it
(undecoded: ``Content-Encoding`` passes through). A provider that cannot be reached or
times out before answering gets the client a 502 or 504 in the provider's error shape;
one that drops its answer mid-way gets the client's connection cut at the same point.
Cancellation (the turn ended) cuts both connections.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

import httpx

from .apis import Route, error_body, response_headers, upstream_request
from .http1 import ClientGone, Exchange
from .observers import ObserverFactory, Observers, ProxiedCall

__all__ = ["UPSTREAM_TIMEOUT", "forward", "new_upstream_client"]

log = logging.getLogger("sandstream.gateway")

UPSTREAM_TIMEOUT: Final = httpx.Timeout(connect=15.0, read=600.0, write=60.0, pool=15.0)
"""Connecting to a provider, and its silence mid-answer (a model may think long)."""
_JSON: Final = b"application/json"
_UPSTREAM_FAILURES: Final = (httpx.TransportError, httpx.InvalidURL)


class _UpstreamCut(ClientGone):
    """The provider's answer was cut: the client's is cut at the same point."""


def new_upstream_client() -> httpx.AsyncClient:
    """The client a turn's calls go upstream with: no headers of its own (the client's
    are forwarded as they are), no redirects followed (they go back to the client)."""
    client = httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT, follow_redirects=False, trust_env=False)
    for name in ("accept", "accept-encoding", "connection", "user-agent"):
        del client.headers[name]
    return client


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.ConnectError):
        return f"could not connect ({exc})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the answer was cut ({exc})"
    return f"{type(exc).__name__}: {exc}"


async def forward(
    client: httpx.AsyncClient,
    exchange: Exchange,
    found: Route,
    key: str,
    base_url: str,
    call: ProxiedCall,
    factories: Sequence[ObserverFactory],
) -> None:
    """Forward ``exchange`` to ``base_url`` with ``key``; see the module docstring.

    Raises :class:`~.http1.ClientGone` when the client left, or to cut the client's
    connection where the provider's answer was cut (the upstream call is closed).
    """
    provider = found.provider
    url, headers = upstream_request(found, exchange.headers, key, base_url)
    observers = Observers(call, factories)
    content = exchange.body() if exchange.has_body else None
    method = exchange.method.decode("latin-1")
    request = client.build_request(method, url, headers=headers, content=content)
    try:
        response = await client.send(request, stream=True)
    except _UPSTREAM_FAILURES as exc:
        reason = _describe(exc)
        observers.cut(reason, upstream=True)
        status = 504 if isinstance(exc, httpx.TimeoutException) else 502
        message = f"the model gateway could not reach {provider.name}: {reason}"
        await exchange.answer(status, error_body(provider, status, message), _JSON)
        return
    except BaseException:
        observers.cut("the client or the turn went away", upstream=False)
        raise
    try:
        await _relay(exchange, response, observers)
    finally:
        await response.aclose()


async def _relay(exchange: Exchange, response: httpx.Response, observers: Observers) -> None:
    """Stream ``response`` to the client, telling ``observers``."""
    reason: bytes = response.extensions.get("reason_phrase", b"")
    headers = response_headers(list(response.headers.raw))
    observers.response(response.status_code, reason.decode("latin-1"), headers)
    chunks = response.aiter_raw()
    try:
        await exchange.start(response.status_code, reason, headers)
        while True:
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                break
            except _UPSTREAM_FAILURES as exc:
                observers.cut(_describe(exc), upstream=True)
                raise _UpstreamCut("the provider's answer was cut") from exc
            observers.chunk(chunk)
            await exchange.send(chunk)
        await exchange.end()
    except _UpstreamCut:
        raise  # observers told; the client's connection is cut where the answer was
    except ClientGone:
        observers.cut("the client went away", upstream=False)
        raise
    except BaseException:
        observers.cut("the turn ended", upstream=False)
        raise
    observers.end()
