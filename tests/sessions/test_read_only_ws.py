"""A session's WebSocket is read-only: what a client sends is refused, and bounded.

The client is wsproto on a plain TCP stream, so that a test can send part of a large
message and see the server's close before the rest: a full client library would
wait to finish sending a message the server no longer reads."""

from __future__ import annotations

from pathlib import Path

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Request

from benchmarks.support.workspace import WorkspaceServer
from sandstream.server.http.serve import MAX_WEBSOCKET_MESSAGE
from tests.server.harness import scripted, shell
from tests.sessions.harness import TOKEN, create, start_sessions

SENT_BYTES = 256 * 1024
"""What the large message's sender gets out before the server must have closed."""


async def _close_code(
    url: str, path: str, payload: bytes, *, declared: int, fragment: int = 0
) -> int:
    """Connect, send one message of ``declared`` bytes of which ``payload`` is the start
    (``fragment``: all of ``payload``, as frames of that many bytes), then read until
    the server's close frame; its code."""
    host, port = url.removeprefix("http://").split(":")
    with trio.fail_after(30):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            ws = WSConnection(ConnectionType.CLIENT)
            headers = [(b"authorization", f"Bearer {TOKEN}".encode())]
            await stream.send_all(ws.send(Request(host=host, target=path, extra_headers=headers)))
            while True:
                ws.receive_data(await stream.receive_some())
                if any(isinstance(event, AcceptConnection) for event in ws.events()):
                    break
            if fragment:
                ends = range(fragment, len(payload) + fragment, fragment)
                frame = b"".join(
                    ws.send(
                        Message(payload[end - fragment : end], message_finished=end >= len(payload))
                    )
                    for end in ends
                )
            elif len(payload) < declared:
                # A frame header announcing ``declared`` bytes, then only ``payload``.
                frame = _binary_frame_header(declared) + payload
            else:
                frame = ws.send(Message(data=payload))
            await stream.send_all(frame)
            while True:
                data = await stream.receive_some()
                assert data, "the server hung up without a close frame"
                ws.receive_data(data)
                for event in ws.events():
                    if isinstance(event, CloseConnection):
                        return event.code


def _binary_frame_header(length: int) -> bytes:
    """A final, masked binary frame's header for ``length`` bytes, with a zero mask (so
    the payload goes as it is)."""
    return bytes([0x82, 0x80 | 127]) + length.to_bytes(8, "big") + bytes(4)


async def test_a_client_message_closes_a_live_session_socket_with_a_clear_code(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = scripted(shell("sleep 30"))
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("wait"))
        path = f"/sessions/{session_id}/ws"
        small = await _close_code(server.url, path, b"hello", declared=5)
        huge = await _close_code(server.url, path, b"x" * SENT_BYTES, declared=16 * 1024 * 1024)
        # the bound is the message's, however many frames it comes in
        pieces = b"x" * (2 * MAX_WEBSOCKET_MESSAGE)
        fragmented = await _close_code(server.url, path, pieces, declared=len(pieces), fragment=512)
        within = pieces[:MAX_WEBSOCKET_MESSAGE]
        small_pieces = await _close_code(
            server.url, path, within, declared=len(within), fragment=512
        )
        await client.post(f"/sessions/{session_id}/interrupt")
    assert small == 1008  # policy: the socket takes no messages
    assert huge == 1009  # too big: refused after a bounded part, never buffered whole
    assert fragmented == 1009
    assert small_pieces == 1008  # within the bound: read whole, then refused
    assert MAX_WEBSOCKET_MESSAGE < SENT_BYTES
