"""The HTTP client a push sender owns, and how it reads an answer.

:class:`OwnedClient` makes the sender an async context manager that closes the client
when it is left, shielded, so that a cancelled sender still closes its connections.
:func:`bounded_send` sends a request and reads at most a bound of its answer's body:
the rest is never read, and the connection is closed (shielded, also when cancelled).
"""

from __future__ import annotations

from types import TracebackType
from typing import Final, Self

import httpx
import trio

__all__ = ["ANSWER_LIMIT", "OwnedClient", "bounded_send"]

ANSWER_LIMIT: Final = 4096
"""Bytes of a push service's answer read: enough for its reason, never its whole
body."""

_DROPPED: Final = frozenset({"content-encoding", "content-length", "transfer-encoding"})
"""Headers of an answer that describe the body left unread."""


class OwnedClient:
    """Base of a sender that opened ``self._client`` and closes it on leaving."""

    _client: httpx.AsyncClient

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with trio.CancelScope(shield=True):
            await self._client.aclose()


async def bounded_send(
    client: httpx.AsyncClient, request: httpx.Request, limit: int = ANSWER_LIMIT
) -> httpx.Response:
    """Send ``request`` on ``client``, never following a redirect (whatever the
    client's ``follow_redirects``); its answer, with the first ``limit`` bytes of
    its body as sent (no content decoding: a compressed body stays compressed) and its
    headers but those describing the whole body. Raises what ``client.send`` raises."""
    response = await client.send(request, stream=True, follow_redirects=False)
    kept = bytearray()
    try:
        async for chunk in response.aiter_raw():
            kept += chunk[: limit - len(kept)]
            if len(kept) >= limit:
                break
    finally:
        with trio.CancelScope(shield=True):
            await response.aclose()
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED]
    return httpx.Response(
        response.status_code, headers=headers, content=bytes(kept), request=request
    )
