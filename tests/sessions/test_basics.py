"""Sessions: create, read by cursor over NDJSON/SSE/WebSocket, status, errors."""

from __future__ import annotations

from pathlib import Path

import msgspec
import trio

from benchmarks.support.session_client import read_session
from benchmarks.support.workspace import WorkspaceServer
from tests.server.harness import load, parse_stream
from tests.sessions.harness import TOKEN, create, read_all, start_sessions, wait_state


async def test_a_session_runs_to_its_end_and_is_read_from_any_cursor(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(120, rate=0, payload_bytes=32)
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("go"))
        whole = await read_all(server, session_id)
        lines = parse_stream(b"".join(whole.chunks))
        assert lines[-1] == {"type": "result", "message": "loaded", "ts": lines[-1]["ts"]}
        assert whole.closed
        status = await wait_state(client, session_id, "completed")
        assert status["last_chunk_id"] == len(whole.chunks) == whole.cursor
        assert (
            msgspec.json.encode(status["terminal"]) + b"\n"
            == msgspec.json.encode(msgspec.json.decode(whole.chunks[-1])) + b"\n"
        )
        assert status["ended_at"] >= status["created_at"]
        for transport in ("ndjson", "sse", "ws", "ws-batch"):
            tail = await read_session(server.url, session_id, TOKEN, transport, 100)
            assert tail.chunks == whole.chunks[100:], transport
            assert tail.closed, transport
        sse = await read_session(server.url, session_id, TOKEN, "sse", 7, use_last_event_id=True)
        assert sse.chunks == whole.chunks[7:]
