"""A Durable Streams server on loopback for the streams tests: sandstream's, or the Node
reference server to compare with.

::

    server = await start_stream_server(nursery, "sandstream", node, tmp_path / "data")
    server.url                           # streams live under f"{server.url}/v1/stream/"
    async with server.client() as http:  # httpx, HTTP/1.1, with the token if it needs one
        ...

``sandstream`` is the runner app (:func:`tests.server.harness.start_runner`) on a real
Hypercorn with its data in the directory given, requiring the runner's bearer token;
``reference`` is :func:`benchmarks.support.reference_server.start_reference_server`, which takes
no token. Both answer a live long-poll with no data after half a second, as the
reference's own conformance run does. Each runs until ``nursery`` is cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import httpx
import trio

from benchmarks.support.reference_server import start_reference_server
from benchmarks.support.servers import http1_client
from sandstream.server.sessions import SessionSettings
from sandstream.server.streams import StreamSettings
from tests.server.harness import TOKEN, start_runner

__all__ = ["SERVERS", "ServerName", "StreamServer", "start_stream_server"]

ServerName = Literal["reference", "sandstream"]
SERVERS: Final[tuple[ServerName, ...]] = ("reference", "sandstream")
LONG_POLL_TIMEOUT: Final = 0.5
"""Seconds a live long-poll waits for data."""


@dataclass(frozen=True)
class StreamServer:
    """A running server: its name, base URL and bearer token (``None``: takes none)."""

    name: ServerName
    url: str
    token: str | None

    def client(self, *, timeout: float = 30.0) -> httpx.AsyncClient:
        """An HTTP/1.1 httpx client for this server, with its token."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        return http1_client(self.url, headers=headers, timeout=timeout)


async def start_stream_server(
    nursery: trio.Nursery, name: ServerName, node: Path, data_dir: Path
) -> StreamServer:
    """Start server ``name`` with its data in ``data_dir``."""
    if name == "reference":
        timeout_ms = round(LONG_POLL_TIMEOUT * 1000)
        reference = await start_reference_server(
            nursery, node, data_dir, long_poll_timeout_ms=timeout_ms
        )
        return StreamServer(name, reference.url, None)
    streams = StreamSettings(directory=data_dir / "streams", long_poll_timeout=LONG_POLL_TIMEOUT)
    sessions = SessionSettings(data_dir=data_dir, streams=streams)
    runner = await start_runner(nursery, sessions=sessions)
    return StreamServer(name, runner.url, TOKEN)


async def read_stream(client: httpx.AsyncClient, path: str) -> bytes:
    """The whole of the stream at ``path``, read from its start one response at a time
    until one says it is up to date."""
    parts = []
    offset = "-1"
    while True:
        response = await client.get(path, params={"offset": offset})
        assert response.status_code == 200, response.text
        parts.append(response.content)
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            return b"".join(parts)
