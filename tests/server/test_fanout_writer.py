"""The fan-out writer (server/http/fanout.py): its bytes, and one writer per socket.

A live connection is written beside ASGI, so its bytes must be HTTP/1.1 chunks exactly
as h11 frames them, and the rest of a write a slow reader's socket did not take must
be on the wire before the response's body writes anything else. The latter is driven
on a real Hypercorn (127.0.0.1:0) with a reader that does not read until the writer
is behind, and every byte it gets is parsed with h11: a torn or reordered write
fails it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Final

import h11
import pytest
import trio
from quart import Response, request
from quart_trio import QuartTrio

from benchmarks.support.servers import serve_app
from sandstream.server.http.asgi import HTTPConnection
from sandstream.server.http.fanout import LiveFraming, http_chunk, live_connection
from tests.support.raw_http import url_address

HEAD: Final = b"written through ASGI before\n"
TAIL: Final = b"written through ASGI after\n"
LINE: Final = b'{"type":"log","level":"info","message":"' + b"x" * 1000 + b'"}\n'
LINES_PER_RUN: Final = 16  # ~16 KB a run
MAX_RUNS: Final = 4096  # ~67 MB: far more than any socket buffer takes
DEADLINE: Final = 30.0


@dataclass(frozen=True)
class _Run:
    first: int
    data: bytes
    count: int


def _numbered(first: int, data: bytes, count: int) -> bytes:
    """A frame function that shows which run its bytes came from."""
    return b"run %d\n%b" % (first, data)


@pytest.mark.parametrize("data", [b"x", b"a line\n", b"\x00" * 70_000])
def test_a_live_write_is_one_http_chunk_byte_for_byte_as_h11_frames_it(data: bytes) -> None:
    server = h11.Connection(h11.SERVER)
    server.receive_data(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
    server.next_event()
    server.next_event()
    server.send(h11.Response(status_code=200, headers=[]))  # no length: chunked
    assert http_chunk(data) == server.send(h11.Data(data=data))


def test_an_empty_http_chunk_is_refused_it_would_end_the_body() -> None:
    with pytest.raises(ValueError):
        http_chunk(b"")


def test_a_transport_frames_each_run_once_for_all_its_connections() -> None:
    framed: list[int] = []

    def frame(first: int, data: bytes, count: int) -> bytes:
        framed.append(first)
        return b"" if data == b"\n" else _numbered(first, data, count)

    framing = LiveFraming(frame)
    one, two, nothing = _Run(1, LINE, 1), _Run(2, LINE, 1), _Run(3, b"\n", 1)
    assert framing.frame_run(one) == http_chunk(_numbered(1, LINE, 1))
    assert (framing.run, framing.payload) == (one, http_chunk(_numbered(1, LINE, 1)))
    assert framing.frame_run(two) == http_chunk(_numbered(2, LINE, 1))
    assert framing.frame_run(nothing) == b""  # a frame of nothing is no chunk at all
    assert framed == [1, 2, 3]


class _SlowReaderBody:
    """``HEAD`` through ASGI; then, inside :func:`live_connection`, runs offered until
    the socket does not take one whole (``behind`` is set then: its rest is still to
    be written); then ``TAIL`` through ASGI."""

    def __init__(self, scope: dict[str, Any], offered: list[_Run], behind: trio.Event) -> None:
        self._scope = scope
        self._framing = LiveFraming(_numbered)
        self._step = 0
        self._offered = offered
        self._behind = behind

    def __aiter__(self) -> _SlowReaderBody:
        return self

    async def __anext__(self) -> bytes:
        self._step += 1
        if self._step == 1:
            return HEAD
        if self._step == 2:
            async with live_connection(self._scope, self._framing) as connection:
                assert connection is not None
                for index in range(MAX_RUNS):
                    run = _Run(index * LINES_PER_RUN + 1, LINE * LINES_PER_RUN, LINES_PER_RUN)
                    self._offered.append(run)
                    if not connection.offer(run):
                        self._behind.set()
                        break
            return TAIL
        raise StopAsyncIteration


async def test_a_slow_readers_rest_is_on_the_wire_before_the_body_writes_again(
    nursery: trio.Nursery,
) -> None:
    offered: list[_Run] = []
    behind = trio.Event()
    app = QuartTrio(__name__)
    app.asgi_http_class = HTTPConnection  # type: ignore[assignment]

    @app.get("/live")
    async def live_route() -> Response:
        response = Response(
            _SlowReaderBody(request.scope, offered, behind), content_type="application/x-ndjson"
        )
        response.timeout = None
        return response

    host, port = url_address(await serve_app(nursery, app))
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect((host, port))
    client = h11.Connection(h11.CLIENT)
    body = b""
    with trio.fail_after(DEADLINE):
        async with trio.SocketStream(sock) as stream:
            request_head = h11.Request(method="GET", target="/live", headers=[("Host", host)])
            await stream.send_all(client.send(request_head) + client.send(h11.EndOfMessage()))
            await behind.wait()  # nothing read until the writer is behind
            ended = False
            while not ended:
                data = await stream.receive_some(65536)
                assert data, "the connection closed before the response ended"
                client.receive_data(data)
                while (event := client.next_event()) is not h11.NEED_DATA:
                    if isinstance(event, h11.Response):
                        assert event.status_code == 200
                    elif isinstance(event, h11.Data):
                        body += bytes(event.data)
                    else:
                        assert isinstance(event, h11.EndOfMessage), event
                        ended = True
                        break
    assert len(offered) < MAX_RUNS  # the last offer was taken only in part
    live = b"".join(_numbered(run.first, run.data, run.count) for run in offered)
    assert body == HEAD + live + TAIL
