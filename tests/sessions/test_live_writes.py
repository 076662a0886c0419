"""Caught-up readers written to by the session itself: a full socket, a reader leaving.

The writer writes each new run straight to the socket of every caught-up reader and
hands a reader whose socket is full the rest of that write. These tests drive that
path over real sockets and parse every byte with h11 (chunked framing) and the SSE
parser: a torn write, a chunk twice or a missing one fails them.
"""

from __future__ import annotations

import socket
from pathlib import Path

import h11
import msgspec
import pytest
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.sse_parser import ServerSentEvent, SSEParser
from sandstream.server.sessions import Session
from tests.server.harness import load
from tests.sessions.harness import (
    TOKEN,
    create,
    read_all,
    session_service,
    start_sessions,
    wait_state,
)

LINES = 300
PAYLOAD = 16_000  # ~4.8 MB in all: far more than the sockets' buffers


class _Reader:
    """One HTTP/1.1 reader of a session's stream on a socket with a small receive
    buffer, able to stop reading at any moment."""

    def __init__(self, stream: trio.SocketStream, accept: str) -> None:
        self.stream = stream
        self.sse = accept == "text/event-stream"
        self.conn = h11.Connection(h11.CLIENT)
        self.parser: SSEParser[ServerSentEvent] = SSEParser()
        self.body = b""
        self.chunks: list[bytes] = []
        self.controls: list[dict[str, object]] = []
        self.ended = False

    @classmethod
    async def open(cls, url: str, session_id: str, accept: str) -> _Reader:
        host, port = url.removeprefix("http://").split(":")
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect((host, int(port)))
        reader = cls(trio.SocketStream(sock), accept)
        headers = [("Host", host), ("Authorization", f"Bearer {TOKEN}"), ("Accept", accept)]
        request = h11.Request(
            method="GET", target=f"/sessions/{session_id}/stream", headers=headers
        )
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
            elif isinstance(event, h11.Data):
                self._take(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self.ended = True
                return
            else:
                raise AssertionError(f"unexpected {event!r}")

    def _take(self, data: bytes) -> None:
        if not self.sse:
            self.body += data
            return
        for event in self.parser.feed(data):
            if event.event == "control":
                self.controls.append(msgspec.json.decode(event.data))
            else:
                assert int(event.id) == len(self.chunks) + 1, "a chunk missing or twice"
                self.chunks.append(event.data.encode() + b"\n")

    def output(self) -> bytes:
        return b"".join(self.chunks) if self.sse else self.body


async def _until_live(reader: _Reader, session: Session, readers: int) -> None:
    """Read until the session counts ``readers`` live readers (this one caught up)."""
    with trio.fail_after(30):
        while session.live_readers < readers:
            with trio.move_on_after(0.01):
                await reader.read_some()


@pytest.mark.parametrize("accept", ["text/event-stream", "application/x-ndjson"])
async def test_a_live_reader_whose_socket_fills_gets_the_rest_then_every_chunk_once(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path, accept: str
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(LINES, rate=100, payload_bytes=PAYLOAD)
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("fill"))
        session = session_service(server).get(session_id)
        stalled = await _Reader.open(server.url, session_id, accept)
        leaving = await _Reader.open(server.url, session_id, accept)
        async with stalled.stream:
            await _until_live(stalled, session, 1)
            await _until_live(leaving, session, 2)
            await leaving.stream.aclose()  # gone while live: only its own stream ends
            # The stalled reader's socket fills: the writer hands it the rest of a write
            # and takes it out of the live set, while the session runs on.
            with trio.fail_after(30):
                while session.live_readers:
                    await trio.sleep(0.01)
            assert not session.ended
            with trio.fail_after(60):
                while not stalled.ended:
                    await stalled.read_some()
        status = await wait_state(client, session_id, "completed")
    whole = b"".join((await read_all(server, session_id)).chunks)
    assert whole.count(b"\n") == status["last_chunk_id"] == LINES + 4
    assert stalled.output() == whole
    if stalled.sse:
        *caught_up, closed = stalled.controls
        assert closed == {"cursor": LINES + 4, "streamClosed": True}
        assert caught_up and all(control["upToDate"] for control in caught_up)


async def test_an_http_1_0_reader_is_never_written_chunks_its_body_has_no_framing(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(40, rate=40, payload_bytes=100)
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("old client"))
        host, port = server.url.removeprefix("http://").split(":")
        body = b""
        with trio.fail_after(60):
            async with await trio.open_tcp_stream(host, int(port)) as stream:
                request = (
                    f"GET /sessions/{session_id}/stream HTTP/1.0\r\nHost: {host}\r\n"
                    f"Authorization: Bearer {TOKEN}\r\nAccept: application/x-ndjson\r\n\r\n"
                )
                await stream.send_all(request.encode())
                while data := await stream.receive_some(65536):  # until the server closes
                    body += data
        await wait_state(client, session_id, "completed")
    head, _, content = body.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
    assert content == b"".join((await read_all(server, session_id)).chunks)


async def test_a_head_request_on_a_live_stream_gets_no_body_at_all(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(40, rate=40, payload_bytes=100)
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("head"))
        host, port = server.url.removeprefix("http://").split(":")
        received = b""
        with trio.fail_after(60):
            async with await trio.open_tcp_stream(host, int(port)) as stream:
                request = (
                    f"HEAD /sessions/{session_id}/stream HTTP/1.1\r\nHost: {host}\r\n"
                    f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n"
                    "Connection: close\r\n\r\n"
                )
                await stream.send_all(request.encode())
                while data := await stream.receive_some(65536):  # closed after the end
                    received += data
        await wait_state(client, session_id, "completed")
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert body == b""
