"""The Agents block: NDJSON forwarded straight, validated, with one terminal guaranteed."""

from __future__ import annotations

from pathlib import Path

import msgspec
import trio
from quart import Response
from quart_trio import QuartTrio

from sandstream.server.chat.ids import now_ms
from tests.chat.harness import WORKSPACE, ChatServer, start_chat_server
from tests.server.harness import parse_stream
from tests.support.servers import serve_app


async def test_an_agents_run_forwards_validated_ndjson(server: ChatServer) -> None:
    body = {
        "workspaceId": WORKSPACE,
        "workflowId": "wf_1",
        "prompt": "run the block",
        "conversation": [{"role": "user", "content": "earlier", "ts": 1}],
    }
    async with server.client() as client:
        response = await client.post("/api/agents/run", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = parse_stream(response.content)  # validated, exactly one terminal, last
    assert lines[-1] == {"type": "result", "message": "Done: run the block", "ts": lines[-1]["ts"]}
    assert any(line["type"] == "log" for line in lines)  # logs stay in the run stream
    # The run's session is settled: its unused tokens are dead.
    session_id = response.headers["x-session-id"]
    rows = await server.store.db.read(
        lambda conn: conn.execute(
            "SELECT purpose, used_at, expires_at FROM tokens WHERE session_id = ?", (session_id,)
        ).fetchall()
    )
    state = {row["purpose"]: (row["used_at"], row["expires_at"]) for row in rows}
    assert state["setup"][0] is not None and state["run"][0] is not None
    assert state["upload"][0] is None and state["upload"][1] <= now_ms()
    async with server.client(auth=False) as client:
        assert (await client.post("/api/agents/run", json=body)).status_code == 401
    async with server.client() as client:
        bad = await client.post("/api/agents/run", json={"prompt": "no workspace"})
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"


def _junk_runner() -> QuartTrio:
    """A runner that streams invalid lines, a valid step, and hangs up with no terminal."""
    app = QuartTrio(__name__)

    @app.post("/stream")
    async def stream() -> Response:
        async def body():  # type: ignore[no-untyped-def]
            yield b"not json\n"
            yield b'{"type":"mystery"}\n'
            yield b'{"type":"step","id":"s1","name":"t","status":"running"}\n'
            yield b'{"type":"step","id":"s1","name":"t","sta'  # cut mid-line

        return Response(body(), content_type="application/x-ndjson")

    return app


async def test_garbage_from_a_runner_never_reaches_the_client(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    junk = await serve_app(nursery, _junk_runner())
    server = await start_chat_server(nursery, tmp_path, embedded=False, sandbox_url=junk)
    async with server.client() as client:
        response = await client.post(
            "/api/agents/run", json={"workspaceId": WORKSPACE, "prompt": "x"}
        )
    lines = parse_stream(response.content)
    assert [line["type"] for line in lines] == ["step", "error"]
    assert lines[-1]["code"] == "upstream_closed"
    # The chat stream holds the same guarantee, and says how many lines it dropped.
    run = await server.turn("junk please")
    assert run.kinds == ["start", "step", "error", "done"]
    assert msgspec.json.decode(run.events[-1].data) == {"terminal": "error", "diagnostics": 3}
    chat = await server.chat(run.chat_id)
    assert chat["messages"][-1]["status"] == "failed"
