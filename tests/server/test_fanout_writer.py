"""The fan-out writer (server/http/fanout.py): its bytes, and one writer per socket.

A live connection is written beside ASGI, so its bytes must be HTTP/1.1 chunks exactly
as h11 frames them, and the backlog of a slow reader (the rest of a write its socket
did not take, the runs offered after it) must be on the wire, in order, before the
response's body writes anything else; a backlog over its bound refuses the run that
overflows it. The latter is driven on a real Hypercorn (127.0.0.1:0) with a reader
that does not read until the writer is behind, and every byte it gets is parsed with
h11: a torn, lost or reordered write fails it.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import h11
import pytest
import trio
from quart import Response, request
from quart_trio import QuartTrio

from benchmarks.support.servers import serve_app
from sandstream.server.http.asgi import HTTPConnection
from sandstream.server.http.fanout import LiveFraming, Offered, http_chunk, live_connection
from tests.support.raw_http import url_address

HEAD: Final = b"written through ASGI before\n"
TAIL: Final = b"written through ASGI after\n"
LINE: Final = b'{"type":"log","level":"info","message":"' + b"x" * 1000 + b'"}\n'
LINES_PER_RUN: Final = 16  # ~16 KB a run
MAX_RUNS: Final = 4096  # ~67 MB: far more than any socket buffer takes
QUEUED_RUNS: Final = 64  # ~1 MB offered once the socket is full
RUN_BYTES: Final = len(LINE) * LINES_PER_RUN
DEADLINE: Final = 30.0


@dataclass(frozen=True)
class _Run:
    first: int
    data: bytes
    count: int


def _numbered(first: int, data: bytes, count: int) -> bytes:
    """A frame function that shows which run its bytes came from."""
    return b"run %d\n%b" % (first, data)


def _payload(run: _Run) -> bytes:
    """What a live connection writes for ``run``."""
    return http_chunk(_numbered(run.first, run.data, run.count))


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
    """``HEAD`` through ASGI; then, inside :func:`live_connection` (its backlog bound
    ``limit``), runs offered until the socket does not take one whole (``behind`` is
    set then); then up to ``QUEUED_RUNS`` more while it is full, until one is refused;
    its backlog is written as it leaves; then ``TAIL`` through ASGI. ``offers``: what
    became of each run offered."""

    def __init__(
        self, scope: Mapping[str, object], limit: int, offered: list[_Run], behind: trio.Event
    ) -> None:
        self._scope = scope
        self._limit = limit
        self._framing = LiveFraming(_numbered)
        self._step = 0
        self.offered = offered
        self.offers: list[Offered] = []
        self._behind = behind

    def __aiter__(self) -> _SlowReaderBody:
        return self

    def _offer(self, connection: Any, index: int) -> Offered:
        run = _Run(index * LINES_PER_RUN + 1, LINE * LINES_PER_RUN, LINES_PER_RUN)
        self.offered.append(run)
        offered: Offered = connection.offer(run)
        self.offers.append(offered)
        return offered

    async def __anext__(self) -> bytes:
        self._step += 1
        if self._step == 1:
            return HEAD
        if self._step == 2:
            scope, framing = self._scope, self._framing
            async with live_connection(scope, framing, backlog_bytes=self._limit) as connection:
                assert connection is not None
                full = 0
                while self._offer(connection, full) == "taken" and full < MAX_RUNS:
                    full += 1
                self._behind.set()
                for index in range(full + 1, full + 1 + QUEUED_RUNS):  # no checkpoint
                    if self._offer(connection, index) == "refused":
                        break
            return TAIL
        raise StopAsyncIteration


async def _read_slowly(limit: int, nursery: trio.Nursery) -> tuple[_SlowReaderBody, bytes]:
    """Serve a :class:`_SlowReaderBody`, read nothing until it is behind, then all of
    it; its body as h11 parsed it."""
    offered: list[_Run] = []
    behind = trio.Event()
    bodies: list[_SlowReaderBody] = []
    app = QuartTrio(__name__)
    app.asgi_http_class = HTTPConnection

    @app.get("/live")
    async def live_route() -> Response:
        bodies.append(_SlowReaderBody(request.scope, limit, offered, behind))
        response = Response(bodies[0], content_type="application/x-ndjson")
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
    live = b"".join(_numbered(run.first, run.data, run.count) for run in offered)
    assert body == HEAD + live + TAIL
    return bodies[0], body


async def test_a_slow_readers_backlog_is_on_the_wire_in_order_before_the_body_writes_again(
    nursery: trio.Nursery,
) -> None:
    body, _ = await _read_slowly(64 * 1024 * 1024, nursery)
    # the socket filled at one run, and every run offered after it was queued
    full = body.offers.index("queued")
    assert full < MAX_RUNS
    assert body.offers[full + 1 :] == ["taken"] * QUEUED_RUNS


async def test_a_run_that_overflows_the_backlog_is_refused_and_still_written(
    nursery: trio.Nursery,
) -> None:
    limit = 8 * RUN_BYTES
    body, _ = await _read_slowly(limit, nursery)
    full = body.offers.index("queued")
    *taken, refused = body.offers[full + 1 :]
    assert taken == ["taken"] * len(taken) and refused == "refused"
    sizes = [len(_payload(run)) for run in body.offered[full:]]
    # the rest of the run that filled the socket (1 byte or more of it) and the runs
    # after it fit the bound; with the refused one they do not
    assert 1 + sum(sizes[1:-1]) <= limit < sum(sizes)
