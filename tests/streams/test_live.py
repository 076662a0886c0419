"""Caught-up ``live=sse`` readers written to by the stream itself (server/streams/live.py).

Each append is framed once and written straight to the socket of every caught-up
reader; a reader whose socket is full stays live while its own task writes the
backlog, and reads on by itself only once that backlog would pass its bound. These
tests drive that path over real sockets and parse every byte with h11 (chunked
framing) and the SSE parser, then hold what each reader decoded against a catch-up
read of the stream: a torn write, an append twice or a missing one fails them.
"""

from __future__ import annotations

import base64
import re
import socket
from pathlib import Path
from typing import Any

import h11
import httpx
import msgspec
import pytest
import trio

from sandstream.core.sse_parser import ServerSentEvent, SSEParser
from sandstream.server.http.fanout import DEFAULT_BACKLOG_BYTES
from sandstream.server.streams import Stream, get_streams
from sandstream.server.streams.cursors import interval_cursor
from tests.server.harness import RunnerServer
from tests.sessions.harness import TOKEN, start_sessions
from tests.streams.servers import read_stream
from tests.support.raw_http import url_address

BIG = 300 * 1024
"""An append over the stream's ``tail_bytes`` (256 KiB): not offered, read by each reader."""


class _Reader:
    """One ``live=sse`` reader on a socket with a small receive buffer, able to stop
    reading at any moment; it keeps the events it parsed."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)
        self.parser: SSEParser[ServerSentEvent] = SSEParser()
        self.base64 = False
        self.data: list[str] = []
        self.controls: list[dict[str, Any]] = []
        self.ended = False

    @classmethod
    async def open(cls, server: RunnerServer, path: str, query: str) -> _Reader:
        host, port = url_address(server.url)
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect((host, port))
        reader = cls(trio.SocketStream(sock))
        headers = [("Host", host), ("Authorization", f"Bearer {TOKEN}")]
        request = h11.Request(method="GET", target=f"{path}?{query}", headers=headers)
        await reader.stream.send_all(
            reader.conn.send(request) + reader.conn.send(h11.EndOfMessage())
        )
        return reader

    async def read_some(self) -> None:
        """One read; parse everything it completes."""
        data = await self.stream.receive_some(65536)
        self.conn.receive_data(data)
        while (event := self.conn.next_event()) is not h11.NEED_DATA:
            if isinstance(event, h11.Response):
                assert event.status_code == 200
                self.base64 = (b"stream-sse-data-encoding", b"base64") in event.headers
            elif isinstance(event, h11.Data):
                for sse in self.parser.feed(bytes(event.data)):
                    if sse.event == "control":
                        self.controls.append(msgspec.json.decode(sse.data))
                    else:
                        assert sse.event == "data"
                        self.data.append(sse.data)
            elif isinstance(event, h11.EndOfMessage):
                self.ended = True
                return
            else:
                raise AssertionError(f"unexpected {event!r}")

    async def read_to_end(self) -> None:
        with trio.fail_after(60):
            while not self.ended:
                await self.read_some()


async def _until_live(readers: list[_Reader], stream: Stream) -> None:
    """Read until every one of ``readers`` waits in the stream's live set."""
    with trio.fail_after(30):
        while stream.live_readers < len(readers):
            for reader in readers:
                with trio.move_on_after(0.01):
                    await reader.read_some()


async def _stream(
    server: RunnerServer, client: httpx.AsyncClient, name: str, content_type: str
) -> Stream:
    created = await client.put(f"/v1/stream/{name}", headers={"Content-Type": content_type})
    assert created.status_code == 201
    return get_streams(server.app).store.get(f"/v1/stream/{name}")


async def _append(client: httpx.AsyncClient, name: str, body: bytes, content_type: str) -> None:
    response = await client.post(
        f"/v1/stream/{name}", content=body, headers={"Content-Type": content_type}
    )
    assert response.status_code == 204, response.text


def _check_controls(reader: _Reader, tail: str) -> None:
    """Offsets that only grow to the tail, cursors that never go back, and the close."""
    *open_, closed = reader.controls
    assert closed == {"streamNextOffset": tail, "streamClosed": True, "upToDate": True}
    offsets = [control["streamNextOffset"] for control in open_]
    assert offsets == sorted(offsets) and offsets[-1] <= tail
    cursors = [int(control["streamCursor"]) for control in open_]
    assert cursors == sorted(cursors)


TEXT = [b"one line", b"two\nlines", b" a leading space\n", b"\n", b"x" * BIG, b"last\n"]
JSON = [b'{"a": 1}', b'[1, "two", {"three": [3]}]', b'"a string\\nwith a newline"', b"null"]
BINARY = [bytes(range(256)), b"\n\r\x00\xff", b"\x00" * BIG, b"end"]


@pytest.mark.parametrize(
    ("content_type", "bodies"),
    [("text/plain", TEXT), ("application/json", JSON), ("application/octet-stream", BINARY)],
)
async def test_live_readers_get_every_append_as_a_catch_up_read_has_it(
    nursery: trio.Nursery, tmp_path: Path, content_type: str, bodies: list[bytes]
) -> None:
    server = await start_sessions(nursery, tmp_path)
    async with server.client() as client:
        stream = await _stream(server, client, "live", content_type)
        ahead = interval_cursor() + 1000  # a cursor a reader was given by jitter before
        readers = [
            await _Reader.open(server, "/v1/stream/live", "offset=-1&live=sse"),
            await _Reader.open(server, "/v1/stream/live", f"offset=-1&live=sse&cursor={ahead}"),
        ]
        await _until_live(readers, stream)
        for body in bodies:
            await _append(client, "live", body, content_type)
        closed = await client.post("/v1/stream/live", headers={"Stream-Closed": "true"})
        tail = closed.headers["Stream-Next-Offset"]
        for reader in readers:
            await reader.read_to_end()
        assert stream.live_readers == 0
        whole = (await client.get("/v1/stream/live", params={"offset": "-1"})).content
    for reader in readers:
        _check_controls(reader, tail)
        if content_type == "application/json":
            messages = [m for event in reader.data for m in msgspec.json.decode(event)]
            assert messages == msgspec.json.decode(whole)
        elif reader.base64:
            assert content_type == "application/octet-stream"
            assert b"".join(base64.b64decode(event) for event in reader.data) == whole
        else:
            assert "".join(reader.data) == re.sub(rb"\r\n|\r", b"\n", whole).decode()
    assert int(readers[1].controls[0]["streamCursor"]) > ahead


async def test_a_live_reader_that_stalls_stays_live_and_then_gets_every_append_once(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    line = b"x" * 16_000
    async with server.client() as client:
        stream = await _stream(server, client, "stall", "text/plain")
        stalled = await _Reader.open(server, "/v1/stream/stall", "offset=-1&live=sse")
        await _until_live([stalled], stream)
        # ~2 MiB while it reads nothing: far more than its 4 KiB receive window lets
        # the socket hold, less than the backlog's bound: it stays in the live set.
        for appended in range(128):
            await _append(client, "stall", b"%d %b" % (appended, line), "text/plain")
            assert stream.live_readers == 1
        with trio.fail_after(60):
            while len(stalled.data) < 128:
                await stalled.read_some()
        assert stream.live_readers == 1
        await client.post("/v1/stream/stall", headers={"Stream-Closed": "true"})
        await stalled.read_to_end()
        whole = await read_stream(client, "/v1/stream/stall")
    assert whole.count(line) == 128
    assert "".join(stalled.data).encode() == whole


async def test_a_live_reader_whose_backlog_overflows_reads_on_and_gets_the_same_bytes(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    line = b"x" * 16_000
    async with server.client() as client:
        stream = await _stream(server, client, "slow", "text/plain")
        stalled = await _Reader.open(server, "/v1/stream/slow", "offset=-1&live=sse")
        await _until_live([stalled], stream)
        # Its socket fills, then its backlog: it leaves the live set holding the
        # append that overflowed it, and then reads what follows by itself.
        appended = 0
        with trio.fail_after(60):
            while stream.live_readers:
                await _append(client, "slow", b"%d %b" % (appended, line), "text/plain")
                appended += 1
        for _ in range(20):
            await _append(client, "slow", b"%d %b" % (appended, line), "text/plain")
            appended += 1
        await client.post("/v1/stream/slow", headers={"Stream-Closed": "true"})
        await stalled.read_to_end()
        whole = await read_stream(client, "/v1/stream/slow")
    assert appended * len(line) > DEFAULT_BACKLOG_BYTES  # the backlog's bound
    assert whole.count(line) == appended
    assert "".join(stalled.data).encode() == whole


async def test_a_live_reader_that_disconnects_with_a_backlog_leaves_the_live_set(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    line = b"x" * 16_000
    async with server.client() as client:
        stream = await _stream(server, client, "gone", "text/plain")
        gone = await _Reader.open(server, "/v1/stream/gone", "offset=-1&live=sse")
        await _until_live([gone], stream)
        for appended in range(64):  # ~1 MiB unread: a backlog its task is writing
            await _append(client, "gone", b"%d %b" % (appended, line), "text/plain")
        assert stream.live_readers == 1
        await gone.stream.aclose()
        with trio.fail_after(30):
            while stream.live_readers:
                await _append(client, "gone", b"after", "text/plain")
                await trio.sleep(0.01)
        # its task ended: the server's nursery, torn down after the test, waits for it
        await client.post("/v1/stream/gone", headers={"Stream-Closed": "true"})


async def test_a_live_reader_that_leaves_is_taken_out_and_the_others_go_on(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    async with server.client() as client:
        stream = await _stream(server, client, "leave", "text/plain")
        leaving = await _Reader.open(server, "/v1/stream/leave", "offset=-1&live=sse")
        staying = await _Reader.open(server, "/v1/stream/leave", "offset=-1&live=sse")
        await _until_live([leaving, staying], stream)
        await leaving.stream.aclose()
        with trio.fail_after(30):
            while stream.live_readers != 1:
                await trio.sleep(0.01)
        await _append(client, "leave", b"after", "text/plain")
        await client.post("/v1/stream/leave", headers={"Stream-Closed": "true"})
        await staying.read_to_end()
        assert stream.live_readers == 0
    assert staying.data == ["after"]
