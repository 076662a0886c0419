"""An Agents-block run's runner stream: embedded, or remote (``POST {SANDBOX_URL}/stream``).

An :class:`Upstream`'s :meth:`~Upstream.pump` sends the runner's NDJSON bytes into a
memory channel until the stream ends, then returns how it ended. Cancellation of the
pump: :class:`EmbeddedUpstream` (the runner's ``TurnStream``, in process) stops the
container and reaps it before returning; :class:`RemoteUpstream` (httpx, HTTP/1.1)
closes the connection, and the remote runner tears its container down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, Protocol

import httpx
import trio

from sandstream.server.chat.model import answer_detail
from sandstream.server.runner import TurnStream

__all__ = [
    "EmbeddedUpstream",
    "RemoteUpstream",
    "Upstream",
    "UpstreamEnd",
]

log = logging.getLogger("sandstream.chat")


@dataclass(frozen=True, slots=True)
class UpstreamEnd:
    """Why an upstream ended without delivering a terminal line: ``error{code, message}``."""

    code: str
    message: str


class Upstream(Protocol):
    """A runner's NDJSON stream for one turn."""

    async def pump(self, send: trio.MemorySendChannel[bytes]) -> UpstreamEnd | None:
        """Send the stream's bytes into ``send`` until it ends (the caller closes it).

        Returns ``None`` when the stream ended normally (the runner's last line is its
        terminal), or why it could not be read to its end. Cancellation: the runner
        side is torn down (embedded: the container is reaped before this returns).
        """
        ...

    def end(self, code: Literal["shutdown"], message: str) -> None:
        """End the turn early (server shutdown): the stream ends with ``error{code}``."""
        ...

    def discard(self) -> None:
        """Release what a never-pumped upstream holds (the runner slot)."""
        ...


class EmbeddedUpstream:
    """The in-process runner: a :class:`TurnStream` in ``ndjson`` mode, admitted already."""

    def __init__(self, turn: TurnStream) -> None:
        self.turn = turn

    async def pump(self, send: trio.MemorySendChannel[bytes]) -> UpstreamEnd | None:
        async with self.turn as turn:
            async for chunk in turn:
                await send.send(chunk)
        return None

    def end(self, code: Literal["shutdown"], message: str) -> None:
        self.turn.end(code, message)

    def discard(self) -> None:
        self.turn.discard()


class RemoteUpstream:
    """``POST {url}/stream`` with the runner token, over HTTP/1.1, read as it streams.

    ``connect_timeout`` bounds connecting and sending the dispatch; reads have no
    timeout (a turn may be quiet for long; the runner enforces the runtime cap).
    Failures become the turn's terminal error: ``runner_unavailable`` (cannot
    connect, 503), ``runner_refused`` (401, 422, other statuses),
    ``upstream_closed`` (the stream broke off), ``shutdown``.
    """

    def __init__(
        self,
        url: str,
        dispatch: bytes,
        *,
        token: str | None,
        connect_timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self._dispatch = dispatch
        self._token = token
        self._connect_timeout = connect_timeout
        self._transport = transport
        self._scope = trio.CancelScope()
        self._ended: UpstreamEnd | None = None

    def end(self, code: Literal["shutdown"], message: str) -> None:
        if self._ended is None:
            self._ended = UpstreamEnd(code, message)
            self._scope.cancel()

    def discard(self) -> None:
        pass

    async def pump(self, send: trio.MemorySendChannel[bytes]) -> UpstreamEnd | None:
        result: UpstreamEnd | None = None
        with self._scope:
            result = await self._stream(send)
        if self._ended is not None:
            return self._ended
        return result

    async def _stream(self, send: trio.MemorySendChannel[bytes]) -> UpstreamEnd | None:
        headers = {"Content-Type": "application/json", "Accept": "application/x-ndjson"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        timeout = httpx.Timeout(
            connect=self._connect_timeout,
            read=None,
            write=self._connect_timeout,
            pool=self._connect_timeout,
        )
        endpoint = f"{self.url}/stream"
        received = False
        try:
            async with (
                httpx.AsyncClient(
                    http1=True, http2=False, timeout=timeout, transport=self._transport
                ) as client,
                client.stream(
                    "POST", endpoint, content=self._dispatch, headers=headers
                ) as response,
            ):
                if response.status_code != 200:
                    return await _refusal(response)
                async for chunk in response.aiter_raw():
                    received = True
                    await send.send(chunk)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return UpstreamEnd(
                "runner_unavailable", f"cannot reach the runner at {endpoint}: {exc}"
            )
        except httpx.TransportError as exc:
            if not received:
                return UpstreamEnd(
                    "runner_unavailable", f"the runner at {endpoint} failed: {exc!r}"
                )
            return UpstreamEnd("upstream_closed", f"the runner's stream broke off: {exc!r}")
        return None


async def _refusal(response: httpx.Response) -> UpstreamEnd:
    """The turn's error for a runner that answered something else than 200."""
    detail = await answer_detail(response)
    status = response.status_code
    message = f"the runner answered {status}" + (f": {detail}" if detail else "")
    if status == 503:
        retry = response.headers.get("Retry-After")
        if retry:
            message += f" (retry after {retry} s)"
        return UpstreamEnd("runner_unavailable", message)
    log.warning("runner %s refused a dispatch: %s", response.url, message)
    return UpstreamEnd("runner_refused", message)
