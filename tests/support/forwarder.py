"""A load balancer stand-in for tests: a loopback TCP forwarder in front of HTTP backends.

Each client connection goes to the first of :attr:`Forwarder.backends` (``host:port``)
that accepts a TCP connection, so a dead replica is skipped as a load balancer's health
check would skip it; when none does, the client gets ``502 Bad Gateway``.
:meth:`Forwarder.lose_response_of` arms a one-shot fault: the next request whose bytes
hold a marker is forwarded whole, but its response is swallowed and the client's
connection closed as soon as the backend starts answering (the request was handled, its
answer lost). :meth:`Forwarder.drop_connections` cuts every open connection (a
replica's connections die with it). Cancelling the nursery it was started in closes
everything.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import trio

__all__ = ["Forwarder", "start_forwarder"]

_BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass(eq=False)
class Forwarder:
    """The forwarder's state: what tests set (``backends``) and read (``used``, ``lost``)."""

    port: int = 0
    backends: list[str] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    """The backend of each connection forwarded, in order (``"502"``: none took it)."""
    lost: int = 0
    """Responses swallowed by :meth:`lose_response_of`."""
    _lose: bytes | None = None
    _open: set[trio.CancelScope] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lose_response_of(self, marker: bytes) -> None:
        """Swallow the response of the next request holding ``marker``."""
        self._lose = marker

    def drop_connections(self) -> None:
        """Close every connection being forwarded now."""
        for scope in list(self._open):
            scope.cancel()

    async def _connect(self) -> tuple[trio.SocketStream, str] | None:
        for backend in list(self.backends):
            host, _, port = backend.rpartition(":")
            try:
                return await trio.open_tcp_stream(host, int(port)), backend
            except OSError:
                continue
        return None

    async def handle(self, client: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            self._open.add(scope)
            try:
                async with client:
                    with _ends(scope):
                        await self._forward(client)
            finally:
                self._open.discard(scope)

    async def _forward(self, client: trio.SocketStream) -> None:
        connected = await self._connect()
        if connected is None:
            self.used.append("502")
            await client.send_all(_BAD_GATEWAY)
            return
        upstream, backend = connected
        self.used.append(backend)
        swallow = trio.Event()
        async with upstream, trio.open_nursery() as nursery:

            async def to_backend() -> None:
                with _ends(nursery.cancel_scope):
                    async for data in client:
                        if self._lose is not None and self._lose in data:
                            self._lose = None
                            swallow.set()
                        await upstream.send_all(data)

            async def to_client() -> None:
                with _ends(nursery.cancel_scope):
                    async for data in upstream:
                        if swallow.is_set():
                            self.lost += 1
                            return
                        await client.send_all(data)

            nursery.start_soon(to_backend)
            nursery.start_soon(to_client)


@contextmanager
def _ends(scope: trio.CancelScope) -> Iterator[None]:
    """One direction of a connection: when it ends (or breaks), the connection ends."""
    try:
        yield
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        scope.cancel()


async def start_forwarder(nursery: trio.Nursery, *backends: str) -> Forwarder:
    """A :class:`Forwarder` listening on 127.0.0.1 (a free port), served in ``nursery``."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    forwarder = Forwarder(port=listeners[0].socket.getsockname()[1], backends=list(backends))
    await nursery.start(trio.serve_listeners, forwarder.handle, listeners)
    return forwarder
