"""Message, interrupt, status, retention and the API's errors."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
import trio
import trio_websocket

from benchmarks.support.model_server import reply, start_model_server, tool_calls
from benchmarks.support.session_client import read_session
from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import ConfigResponse, EnvResponse, OpenAIAgent
from sandstream.core.sse_parser import SSEParser
from sandstream.server import LocalContainer
from tests.server.harness import load, parse_stream, scripted, shell, wait_gone, wait_until_alive
from tests.sessions.harness import (
    TOKEN,
    create,
    read_all,
    session_service,
    start_sessions,
    wait_state,
)


async def test_interrupt_mid_tool_ends_the_session_and_its_process_group(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = scripted(shell("sleep 313"))
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("wait"))
        session = session_service(server).get(session_id)
        with trio.fail_after(30):
            while not isinstance(session.turn and session.turn.container, LocalContainer):
                await trio.sleep(0.01)
        assert session.turn is not None
        container = session.turn.container
        assert isinstance(container, LocalContainer)
        tool_pids = await wait_until_alive(container.pid, "sleep 313")
        with trio.fail_after(30):
            while session.last_cursor < 3:  # bootstrap, skills, the step's "running"
                await trio.sleep(0.01)
        response = await client.post(f"/sessions/{session_id}/interrupt")
        assert response.status_code == 200, response.text
        status = response.json()
        assert status["state"] == "interrupted"
        assert status["terminal"]["code"] == "interrupted"
        await wait_gone(container.pgid, tool_pids)
        again = await client.post(f"/sessions/{session_id}/interrupt")
        assert again.status_code == 200
        assert again.json() == status
        late = await client.post(f"/sessions/{session_id}/message", json={"text": "hello?"})
        assert late.status_code == 409
        assert late.headers["Content-Type"] == "application/problem+json"
        ended = late.json()
        assert ended["type"] == "urn:sandstream:problem:session-ended"
        assert (ended["state"], ended["last_chunk_id"]) == ("interrupted", status["last_chunk_id"])
    lines = parse_stream(b"".join((await read_all(server, session_id)).chunks))
    assert (lines[-1]["type"], lines[-1]["code"]) == ("error", "interrupted")
    steps = [(line["name"], line["status"]) for line in lines if line["type"] == "step"]
    assert steps == [("run_shell", "running")]  # the interrupt comes before it ends


async def test_a_message_mid_run_reaches_the_agents_next_model_call(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path / "data")
    model = await start_model_server(nursery)
    gate = tmp_path / "gate"
    workspace.env = EnvResponse(vars=model.env())
    workspace.config = ConfigResponse(agent=OpenAIAgent())
    command = f"while [ ! -e {gate} ]; do sleep 0.01; done; echo opened"
    model.add(tool_calls(("run_shell", {"command": command})), reply("Noted, with tests."))
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("build it"))
        with trio.fail_after(30):
            while not model.requests:
                await trio.sleep(0.01)
            # The chunks before the model call are stored (asynchronously: not
            # necessarily by the time the call is made).
            while (stored := (await client.get(f"/sessions/{session_id}/status")).json())[
                "last_chunk_id"
            ] < 1:
                await trio.sleep(0.01)
        response = await client.post(
            f"/sessions/{session_id}/message", json={"text": "please add tests"}
        )
        assert response.status_code == 200, response.text
        cursor = response.json()["cursor"]
        assert cursor >= stored["last_chunk_id"]  # the newest chunk when it was handed over
        gate.write_text("go")
        status = await wait_state(client, session_id, "completed")
        assert status["terminal"]["message"] == "Noted, with tests."
        bad = await client.post(f"/sessions/{session_id}/message", json={"txt": "x"})
        assert bad.status_code == 422
    first, second = model.requests
    assert [m["content"] for m in first["messages"] if m["role"] == "user"] == ["build it"]
    assert second["messages"][-1] == {"role": "user", "content": "please add tests"}
    whole = (await read_all(server, session_id)).chunks
    logs = [msgspec.json.decode(line).get("message") for line in whole]
    taken_at = logs.index("user message: please add tests") + 1
    assert taken_at > cursor  # taken by the agent after it was handed over


async def test_retention_answers_410_below_the_kept_chunks(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path, retain_chunks=10)
    workspace.config = load(50, rate=500)  # a few lines per read: many runs
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("x"))
        status = await wait_state(client, session_id, "completed")
        last, first = status["last_chunk_id"], status["first_chunk_id"]
        # at least the newest 10 are kept, and whole runs below them are dropped
        assert 1 < first <= last - 9
        for cursor in (0, first - 2):
            gone = await client.get(f"/sessions/{session_id}/stream", params={"cursor": cursor})
            assert gone.status_code == 410
            assert gone.headers["Content-Type"] == "application/problem+json"
            assert gone.json()["type"] == "urn:sandstream:problem:cursor-gone"
            assert gone.json()["first_chunk_id"] == first
        sse = await client.get(
            f"/sessions/{session_id}/stream",
            headers={"Accept": "text/event-stream", "Last-Event-ID": "0"},
        )
        assert sse.status_code == 410
    kept = await read_all(server, session_id, cursor=first - 1)
    assert len(kept.chunks) == last - first + 1
    assert parse_stream(b"".join(kept.chunks[-1:]))[-1]["type"] == "result"
    with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
        await read_session(server.url, session_id, TOKEN, "ws", 0)
    assert rejected.value.status_code == 410


async def test_errors_are_problem_json(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(5)
    async with server.client(auth=False) as anonymous:
        for method, path in [
            ("POST", "/sessions"),
            ("GET", "/sessions/ses_x/status"),
            ("GET", "/sessions/ses_x/stream"),
            ("POST", "/sessions/ses_x/message"),
            ("POST", "/sessions/ses_x/interrupt"),
        ]:
            response = await anonymous.request(method, path)
            assert response.status_code == 401, (method, path)
            assert response.headers["Content-Type"] == "application/problem+json"
    with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
        await read_session(server.url, "ses_x", "wrong-token", "ws", 0)
    assert rejected.value.status_code == 401
    async with server.client() as client:
        missing = await client.get("/sessions/ses_nope/status")
        assert missing.status_code == 404
        assert missing.headers["Content-Type"] == "application/problem+json"
        invalid = await client.post("/sessions", json={"prompt": "no tokens"})
        assert invalid.status_code == 422
        session_id = await create(client, workspace.mint_dispatch("x"))
        status = await wait_state(client, session_id, "completed")
        for cursor in ("-1", "abc", str(status["last_chunk_id"] + 1)):
            response = await client.get(f"/sessions/{session_id}/stream", params={"cursor": cursor})
            assert response.status_code == 422, cursor
        for batch in ("0", "x", str(64 * 1024 * 1024 + 1)):
            url = server.url.replace("http://", "ws://") + f"/sessions/{session_id}/ws"
            with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
                async with trio_websocket.open_websocket_url(
                    f"{url}?batch={batch}",
                    extra_headers=[(b"Authorization", f"Bearer {TOKEN}".encode())],
                ):
                    pass
            assert rejected.value.status_code == 422, batch
            assert b"batch must be" in (rejected.value.body or b""), batch
        done = await client.get(
            f"/sessions/{session_id}/stream", params={"cursor": status["last_chunk_id"]}
        )
        assert done.status_code == 204  # at the end of an ended session: nothing more
        assert done.content == b""
        assert done.headers["Stream-Closed"] == "true"
        assert done.headers["Session-Last-Chunk-Id"] == str(status["last_chunk_id"])


async def test_a_sessions_chunks_are_its_durable_stream_stored_once(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(30, rate=2000)  # several runs
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("x"))
        status = await wait_state(client, session_id, "completed")
        stream = await client.get(f"/v1/stream/sessions/{session_id}", params={"offset": "-1"})
        refused = await client.post(
            f"/v1/stream/sessions/{session_id}",
            content=b"{}\n",
            headers={"Content-Type": "application/x-ndjson"},
        )
    whole = await read_all(server, session_id)
    assert stream.status_code == 200 and stream.headers["Stream-Closed"] == "true"
    assert stream.headers["Content-Type"] == "application/x-ndjson"
    assert stream.content == b"".join(whole.chunks)
    assert refused.status_code == 405
    with sqlite3.connect(tmp_path / "sessions.sqlite3") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert "chunks" not in tables
        row = conn.execute(
            "SELECT state, last_cursor FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        assert row == ("completed", status["last_chunk_id"])
    logs = [path for path in (tmp_path / "streams" / "logs").rglob("*.seg")]
    on_disk = sum(path.stat().st_size for path in logs)
    runs = on_disk - len(stream.content)
    assert runs > 0 and runs % 17 == 0  # a 17-byte frame per run, nothing more


async def test_idle_sse_readers_get_keep_alive_comments_that_make_no_event(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path, keepalive=0.05)
    workspace.config = scripted(shell("sleep 315"))
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("idle"))
        session = session_service(server).get(session_id)
        with trio.fail_after(30):
            while session.last_cursor < 3:
                await trio.sleep(0.01)
        host, port = server.url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(
                f"GET /sessions/{session_id}/stream HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n".encode()
            )
            seen = b""
            with trio.fail_after(30):
                while seen.count(b": ping\n") < 3:
                    seen += await stream.receive_some(65536)
        await client.post(f"/sessions/{session_id}/interrupt")
    body = seen.split(b"\r\n\r\n", 1)[1]
    assert b": ping\n\n" not in body  # never a blank line after it
    parser = SSEParser()
    events = parser.feed(body.replace(b"\r\n", b"\n"))
    # chunked framing aside: 3 chunks, then the "caught up" control, nothing else
    kinds = [event.event for event in events]
    assert kinds == ["message", "message", "message", "control"]
    assert [event.id for event in events[:3]] == ["1", "2", "3"]


async def test_shutdown_ends_live_sessions_with_a_terminal_their_readers_get(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = scripted(shell("sleep 316"))
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("long"))
        session = session_service(server).get(session_id)
        with trio.fail_after(30):
            while session.last_cursor < 3:
                await trio.sleep(0.01)
    results = []
    chunks: list[bytes] = []
    caught_up = trio.Event()

    def take(cursor: int, line: bytes) -> None:
        chunks.append(line)
        if cursor == 3:
            caught_up.set()

    async def follow() -> None:
        results.append(await read_session(server.url, session_id, TOKEN, "sse", 0, on_chunk=take))

    async with trio.open_nursery() as readers:
        readers.start_soon(follow)
        with trio.fail_after(30):
            await caught_up.wait()
        await server.shutdown()
    assert session.state == "failed" and session.closed.is_set()
    (result,) = results
    assert result.closed
    last = msgspec.json.decode(chunks[-1])
    assert (last["type"], last["code"]) == ("error", "shutdown")
    with sqlite3.connect(tmp_path / "sessions.sqlite3") as conn:
        row = conn.execute("SELECT state FROM sessions WHERE id = ?", (session_id,)).fetchone()
    assert row == ("failed",)
