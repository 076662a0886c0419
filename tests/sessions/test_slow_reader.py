"""Readers that stop reading (SSE, WebSocket batches) slow nothing and cost the server
bounded memory."""

from __future__ import annotations

import hashlib
from pathlib import Path

import psutil
import trio
import trio_websocket

from benchmarks.support.session_client import read_session
from benchmarks.support.workspace import WorkspaceServer
from tests.server.harness import load
from tests.sessions.harness import TOKEN, create, start_sessions, wait_state

LINES = 120_000
PAYLOAD = 1000  # ~121 MB of output in all
PEAK_LIMIT = 48 * 1024 * 1024
"""The RSS the whole process may grow by: its fixed caches (the session's in-memory
tail and read-ahead, SQLite's page caches, the sockets' buffers, allocator slack:
20-30 MiB) and far less than the output, which a reader queueing it would hold."""


async def test_a_reader_that_never_reads_does_not_hold_back_the_session_or_others(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(LINES, payload_bytes=PAYLOAD)
    process = psutil.Process()
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("big"))
        rss_before = process.memory_info().rss
        # The stalled reader: asks for the stream, then never reads a byte.
        host, port = server.url.removeprefix("http://").split(":")
        stalled = await trio.open_tcp_stream(host, int(port))
        request = (
            f"GET /sessions/{session_id}/stream?cursor=0 HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
        )
        await stalled.send_all(request.encode())
        # And one over the WebSocket in batches (the log mover's way), never read either.
        ws_url = server.url.replace("http://", "ws://", 1) + f"/sessions/{session_id}/ws"
        stalled_ws = await trio_websocket.connect_websocket_url(
            nursery,
            f"{ws_url}?cursor=0&batch={256 * 1024}",
            extra_headers=[(b"Authorization", f"Bearer {TOKEN}".encode())],
            message_queue_size=1,
        )
        try:
            live = hashlib.sha256()
            size = [0]

            def take(cursor: int, line: bytes) -> None:
                live.update(line)
                size[0] += len(line)

            with trio.fail_after(120):
                result = await read_session(server.url, session_id, TOKEN, "sse", 0, on_chunk=take)
            assert result.closed
            status = await wait_state(client, session_id, "completed")
            assert result.cursor == status["last_chunk_id"] == LINES + 4
            peak = process.memory_info().rss - rss_before
            # Afterwards, the whole output again (from SQLite), compared by hash.
            again = hashlib.sha256()
            await read_session(
                server.url, session_id, TOKEN, "ndjson", 0, on_chunk=lambda c, b: again.update(b)
            )
            assert live.hexdigest() == again.hexdigest()
            assert size[0] > LINES * PAYLOAD
            # ~121 MB went by while two readers held their connections without reading:
            # nothing queued for it beyond one batch and the sockets' buffers.
            assert peak < PEAK_LIMIT, f"RSS grew by {peak / 2**20:.1f} MiB"
        finally:
            await stalled.aclose()
            with trio.move_on_after(5):
                await stalled_ws.aclose()
