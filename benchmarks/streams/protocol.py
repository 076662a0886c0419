"""The Durable Streams operations the benchmark's parent does itself, untimed, over httpx:
create a stream, append, close it, read it whole to check it.

Each raises :class:`ProtocolError` (naming the server, the stream and the status) on
an answer the protocol does not allow; nothing is retried. Cancelled, a call may
leave a stream half written (in a data dir the run throws away).
"""

from __future__ import annotations

import httpx

from .servers import PREFIX, StreamServer

__all__ = ["ProtocolError", "append", "close", "create", "read_all"]


class ProtocolError(Exception):
    """A server answered what the protocol does not allow here."""


def _check(server: StreamServer, response: httpx.Response, ok: tuple[int, ...]) -> None:
    if response.status_code not in ok:
        raise ProtocolError(
            f"{server.name}: {response.request.method} {response.request.url.path} answered "
            f"{response.status_code} {response.text[:200]!r}"
        )


async def create(
    client: httpx.AsyncClient, server: StreamServer, stream: str, content_type: str
) -> None:
    response = await client.put(
        server.url + PREFIX + stream, headers={**server.headers, "Content-Type": content_type}
    )
    _check(server, response, (201,))


async def append(
    client: httpx.AsyncClient, server: StreamServer, stream: str, content_type: str, body: bytes
) -> None:
    response = await client.post(
        server.url + PREFIX + stream,
        headers={**server.headers, "Content-Type": content_type},
        content=body,
    )
    _check(server, response, (200, 204))


async def close(client: httpx.AsyncClient, server: StreamServer, stream: str) -> None:
    """Close ``stream`` (an empty POST with ``Stream-Closed: true``)."""
    response = await client.post(
        server.url + PREFIX + stream, headers={**server.headers, "Stream-Closed": "true"}
    )
    _check(server, response, (200, 204))


async def read_all(client: httpx.AsyncClient, server: StreamServer, stream: str) -> bytes:
    """Every byte of ``stream``, from ``-1``, following ``Stream-Next-Offset`` until an
    answer says ``Stream-Up-To-Date``."""
    parts = []
    offset = "-1"
    while True:
        response = await client.get(
            server.url + PREFIX + stream, params={"offset": offset}, headers=server.headers
        )
        _check(server, response, (200,))
        parts.append(response.content)
        offset = response.headers["stream-next-offset"]
        if response.headers.get("stream-up-to-date", "").lower() == "true":
            return b"".join(parts)
