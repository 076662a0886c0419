"""The gateway's own upstream client against real servers on loopback: TLS verified
against the system's trust (here a throwaway CA), connections kept per origin and
reused, one the provider closed while idle never reused, a silent or absent
provider an error of its own."""

from __future__ import annotations

import ssl
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from benchmarks.support.redis_server import make_tls_files
from sandstream.server.gateway.errors import UpstreamConnectError
from sandstream.server.gateway.upstream import UpstreamAnswer, UpstreamPool

BODY = b'{"data": []}'


class Provider:
    """A raw HTTP/1.1 server: answers each request with ``BODY``; counts connections;
    closes each after ``per_connection`` answers."""

    def __init__(self, per_connection: int = 100) -> None:
        self.connections = 0
        self.per_connection = per_connection

    async def serve(self, stream: trio.abc.Stream) -> None:
        self.connections += 1
        async with stream:
            pending = b""
            for _ in range(self.per_connection):
                while b"\r\n\r\n" not in pending:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    pending += data
                _, _, pending = pending.partition(b"\r\n\r\n")
                head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(BODY)
                await stream.send_all(head + BODY)


async def _get(pool: UpstreamPool, url: str) -> tuple[int, bytes]:
    answer: UpstreamAnswer = await pool.call(b"GET", url, [], None)
    try:
        body = b"".join([piece async for piece in answer.body()])
    finally:
        await answer.aclose()
    return answer.status, body


async def test_https_is_verified_and_its_connection_kept(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = make_tls_files(tmp_path, host_names=("localhost",))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files.server_cert, files.server_key)
    provider = Provider()

    async def serve_tls(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, context, server_side=True)
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError:
            return  # the client refused the certificate
        await provider.serve(tls)

    [listener] = await nursery.start(partial(trio.serve_tcp, serve_tls, 0, host="127.0.0.1"))
    url = f"https://localhost:{listener.socket.getsockname()[1]}/v1/models"
    untrusting = UpstreamPool()
    with pytest.raises(UpstreamConnectError, match="could not connect"):
        await _get(untrusting, url)  # the throwaway CA is not trusted yet
    monkeypatch.setenv("SSL_CERT_FILE", str(files.ca))
    pool = UpstreamPool()
    try:
        assert await _get(pool, url) == (200, BODY)
        assert await _get(pool, url) == (200, BODY)
    finally:
        await pool.aclose()
    assert provider.connections == 1  # both calls on one connection


async def test_a_connection_the_provider_closed_while_idle_is_not_reused(
    nursery: trio.Nursery,
) -> None:
    provider = Provider(per_connection=1)
    [listener] = await nursery.start(partial(trio.serve_tcp, provider.serve, 0, host="127.0.0.1"))
    url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}/v1/models"
    pool = UpstreamPool()
    try:
        for _ in range(3):
            assert await _get(pool, url) == (200, BODY)
            await trio.testing.wait_all_tasks_blocked()  # the provider's close is seen
    finally:
        await pool.aclose()
    assert provider.connections == 3


async def test_no_provider_and_a_bad_url_are_connect_errors() -> None:
    pool = UpstreamPool()
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with pytest.raises(UpstreamConnectError, match="could not connect"):
        await pool.call(b"GET", f"http://127.0.0.1:{port}/v1/models", [], None)
    with pytest.raises(UpstreamConnectError, match="bad provider URL"):
        await pool.call(b"GET", "ftp://example.invalid/v1/models", [], None)
