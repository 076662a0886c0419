"""Chat viewers an embedded session writes to itself once they are caught up.

A caught-up viewer of a chat turn joins its session's live set: the session renders
each new run as the chat's step frames and writes them straight to the viewer's
socket. These tests read such a viewer over a real socket, parse every byte with h11
(chunked framing) and the core's SSE parser, and check the frames against the
session's own chunks: a torn write, a frame twice or a missing one fails them; a
viewer that stops reading for a while stays live (its backlog written by its own
task) and then gets every frame; and a viewer that stops reading for good is still
cut off by the chat's stall watchdog.
"""

from __future__ import annotations

from pathlib import Path

import h11
import msgspec
import pytest
import trio

from sandstream.core.schemas import LoadSpec, ScriptedAgent
from sandstream.core.sse_parser import ServerSentEvent, SSEParser
from sandstream.server.sessions import Session
from tests.chat.harness import API_TOKEN, DEADLINE, WORKSPACE, ChatServer, plans, start_chat_server

pytestmark = pytest.mark.usefixtures("chat_database")

PACED = ScriptedAgent(load=LoadSpec(lines=400, rate=200, payload_bytes=2000, line_type="step"))


class _Viewer:
    """``POST /api/assistant/chat/stream`` on a socket with a small receive buffer,
    parsed as it is read."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)
        self.parser: SSEParser[ServerSentEvent] = SSEParser()
        self.events: list[ServerSentEvent] = []
        self.ended = False

    @classmethod
    async def open(cls, server: ChatServer, message: str) -> _Viewer:
        host, port = server.url.removeprefix("http://").split(":")
        sock = trio.socket.socket()
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
        await sock.connect((host, int(port)))
        viewer = cls(trio.SocketStream(sock))
        body = msgspec.json.encode({"workspaceId": WORKSPACE, "message": message})
        headers = [
            ("Host", host),
            ("Authorization", f"Bearer {API_TOKEN}"),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
        ]
        request = h11.Request(method="POST", target="/api/assistant/chat/stream", headers=headers)
        await viewer.stream.send_all(
            viewer.conn.send(request) + viewer.conn.send(h11.Data(data=body))
            + viewer.conn.send(h11.EndOfMessage())
        )  # fmt: skip
        return viewer

    async def read_some(self) -> None:
        data = await self.stream.receive_some(65536)
        self.conn.receive_data(data)
        if not data:
            self.ended = True
            return
        while (event := self.conn.next_event()) is not h11.NEED_DATA:
            if isinstance(event, h11.Response):
                assert event.status_code == 200
            elif isinstance(event, h11.Data):
                self.events += self.parser.feed(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self.ended = True
                return

    def session(self, server: ChatServer) -> Session:
        start = msgspec.json.decode(self.events[0].data)
        assert self.events[0].event == "start"
        assert server.service.sessions is not None
        return server.service.sessions.get(start["sessionId"])


async def _until_live(viewer: _Viewer, server: ChatServer) -> Session:
    """Read until the viewer's session writes to it itself."""
    with trio.fail_after(DEADLINE):
        while not viewer.events:
            await viewer.read_some()
        session = viewer.session(server)
        while not session.live_readers:
            with trio.move_on_after(0.01):
                await viewer.read_some()
    return session


async def _read_to_end(viewer: _Viewer, session: Session) -> None:
    """Read the rest; every step frame is the session's step chunk, once, in order."""
    with trio.fail_after(DEADLINE):
        while not viewer.ended:
            await viewer.read_some()
    chunks = [chunk for run in await session.read_runs(0, 1 << 30) for chunk in run.lines]
    steps = [c[:-1].decode() for c in chunks if c.startswith(b'{"type":"step"')]
    frames = [e for e in viewer.events if e.event == "step"]
    assert [e.data for e in frames] == steps  # none lost, none twice, in order
    ids = [int(e.id) for e in viewer.events if e.id]
    assert ids == sorted(set(ids))
    assert [e.event for e in viewer.events[-2:]] == ["result", "done"]


async def test_a_caught_up_viewer_gets_every_frame_once_as_the_session_wrote_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=plans(paced=PACED))
    viewer = await _Viewer.open(server, "paced please")
    async with viewer.stream:
        session = await _until_live(viewer, server)
        await _read_to_end(viewer, session)


async def test_a_live_viewer_that_stalls_stays_live_and_then_gets_every_frame_once(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=plans(paced=PACED))
    viewer = await _Viewer.open(server, "paced please")
    async with viewer.stream:
        session = await _until_live(viewer, server)
        # It reads nothing while the session writes ~400 KB of steps: far more than its
        # 4 KiB receive window lets the socket hold, less than the backlog's bound.
        stalled_at = session.last_cursor
        with trio.fail_after(DEADLINE):
            while session.last_cursor < stalled_at + 200:
                assert session.live_readers == 1
                await trio.sleep(0.01)
        assert session.live_readers == 1 and not session.ended
        await _read_to_end(viewer, session)


async def test_a_live_viewer_that_stops_reading_is_cut_off_and_the_turn_goes_on(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=plans(paced=PACED), stall_timeout=1.0)
    viewer = await _Viewer.open(server, "paced please")
    async with viewer.stream:
        session = await _until_live(viewer, server)
        # It reads no more: the session's writes fill its socket, the rest of one goes
        # to the viewer's own task, whose write blocks; the watchdog cuts the client.
        with trio.fail_after(DEADLINE):
            while len(server.service.turns.viewers):
                await trio.sleep(0.05)
        assert not session.ended  # the turn outlives its viewer (onDisconnect: continue)
        with trio.fail_after(DEADLINE):
            await session.closed.wait()
    assert session.state == "completed"
