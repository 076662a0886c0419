"""The HTTP client a push sender owns: :class:`OwnedClient` makes the sender an async
context manager that closes the client when it is left, shielded, so that a cancelled
sender still closes its connections."""

from __future__ import annotations

from types import TracebackType
from typing import Self

import httpx
import trio

__all__ = ["OwnedClient"]


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
