"""HTTP/1.1 over a raw TCP socket, for tests about what the server does to the connection.

httpx pools and retries connections and hides when the server closes one; these
helpers send exact bytes and report exactly what came back and when the server closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import trio

__all__ = ["RawResponse", "connect", "read_response", "read_until_closed", "url_address"]


@dataclass
class RawResponse:
    """One response read off a socket: status line, headers (lower-cased), body."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return msgspec.json.decode(self.body)


def url_address(url: str) -> tuple[str, int]:
    """``("127.0.0.1", 43117)`` from ``http://127.0.0.1:43117``."""
    host, _, port = url.removeprefix("http://").rstrip("/").rpartition(":")
    return host, int(port)


async def connect(url: str) -> trio.SocketStream:
    host, port = url_address(url)
    return await trio.open_tcp_stream(host, port)


async def read_response(stream: trio.SocketStream, *, timeout: float = 30.0) -> RawResponse:
    """Read one response (``Content-Length`` framed, or up to EOF without one)."""
    buffer = bytearray()
    with trio.fail_after(timeout):
        while b"\r\n\r\n" not in buffer:
            chunk = await stream.receive_some()
            assert chunk, f"the connection closed before a response: {bytes(buffer)!r}"
            buffer += chunk
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = bytearray(rest)
        if "content-length" in headers:
            length = int(headers["content-length"])
            while len(body) < length:
                chunk = await stream.receive_some()
                assert chunk, "the connection closed inside the body"
                body += chunk
        else:
            body += await read_until_closed(stream, timeout=timeout)
    return RawResponse(int(status_line.split()[1]), headers, bytes(body))


async def read_until_closed(stream: trio.SocketStream, *, timeout: float) -> bytes:
    """Everything the server still sends until it closes (EOF or reset); fails at ``timeout``."""
    received = bytearray()
    with trio.fail_after(timeout):
        while True:
            try:
                chunk = await stream.receive_some()
            except trio.BrokenResourceError:
                return bytes(received)
            if not chunk:
                return bytes(received)
            received += chunk
