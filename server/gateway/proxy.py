"""One proxied call: the client's request streamed to the provider with the real key,
the provider's answer streamed back byte for byte, observers told as it passes.

:func:`forward` never buffers: each chunk of the request body goes upstream as the
client sends it, each piece of the answer goes to the client as the provider sends it
(undecoded: ``Content-Encoding`` passes through; a ``Content-Length`` answer's bytes as
they were read, a chunked one's payload in the client's framing). A provider that
cannot be reached or times out before answering gets the client a 502 or 504 in the
provider's error shape; one that drops its answer mid-way gets the client's connection
cut at the same point. Cancellation (the turn ended) cuts both connections.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from .apis import Route, error_body, response_headers, upstream_request
from .errors import UpstreamError, UpstreamTimeout
from .http1 import ClientGone, Exchange
from .observers import ObserverFactory, Observers, ProxiedCall
from .upstream import UpstreamAnswer, UpstreamPool

__all__ = ["forward"]

log = logging.getLogger("sandstream.gateway")

_JSON: Final = b"application/json"


class _UpstreamCut(ClientGone):
    """The provider's answer was cut: the client's is cut at the same point."""


async def forward(
    pool: UpstreamPool,
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
    try:
        answer = await pool.call(exchange.method, url, headers, content)
    except UpstreamError as exc:
        observers.cut(str(exc), upstream=True)
        status = 504 if isinstance(exc, UpstreamTimeout) else 502
        message = f"the model gateway could not reach {provider.name}: {exc}"
        await exchange.answer(status, error_body(provider, status, message), _JSON)
        return
    except BaseException:
        observers.cut("the client or the turn went away", upstream=False)
        raise
    try:
        await _relay(exchange, answer, observers)
    finally:
        await answer.aclose()


async def _relay(exchange: Exchange, answer: UpstreamAnswer, observers: Observers) -> None:
    """Stream ``answer`` to the client, telling ``observers``."""
    headers = response_headers(answer.headers)
    observers.response(answer.status, answer.reason.decode("latin-1"), headers)
    pieces = answer.body()
    try:
        await exchange.start(answer.status, answer.reason, headers, hold=answer.body_at_hand)
        while True:
            try:
                piece = await pieces.__anext__()
            except StopAsyncIteration:
                break
            except UpstreamError as exc:
                observers.cut(str(exc), upstream=True)
                raise _UpstreamCut("the provider's answer was cut") from exc
            observers.chunk(piece)
            await exchange.send(piece)
        await exchange.end()
    except _UpstreamCut:
        raise  # observers told; the client's connection is cut where the answer was
    except ClientGone:
        observers.cut("the client went away", upstream=False)
        raise
    except BaseException:
        observers.cut("the turn ended", upstream=False)
        raise
    finally:
        await pieces.aclose()
    observers.end()
