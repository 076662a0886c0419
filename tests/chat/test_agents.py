"""The Agents block: NDJSON forwarded straight, validated, with one terminal guaranteed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from quart import Response
from quart_trio import QuartTrio

from benchmarks.support.servers import serve_app
from sandstream.server.chat.model.ids import now_ms
from tests.chat.harness import WORKSPACE, ChatServer, scripted, start_chat_server, write
from tests.server.harness import parse_stream

pytestmark = pytest.mark.usefixtures("chat_database")


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
        async def body() -> AsyncIterator[bytes]:
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
    # A chat turn is a runner session: a "runner" without /sessions is refused (502),
    # and nothing of the turn is kept.
    run = await server.turn("junk please")
    assert run.status == 502 and run.problem["type"] == "urn:sandstream:problem:runner-failed"


async def test_an_agents_runs_written_back_files_are_listed_and_downloaded(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    agent = scripted(write("output/reports/summary.md", "# Summary\n"), write("output/a.txt", "A"))
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    params = {"workspaceId": WORKSPACE}
    async with server.client() as client:
        response = await client.post("/api/agents/run", json={**params, "prompt": "report"})
        assert parse_stream(response.content)[-1]["type"] == "result"
        session_id = response.headers["x-session-id"]
        base = f"/api/agents/runs/{session_id}/files"
        listed = await client.get(base, params=params)
        assert listed.status_code == 200
        files = listed.json()["files"]
        assert sorted((f["name"], f["size"], f["source"]) for f in files) == [
            ("a.txt", 1, "result"),
            ("reports/summary.md", 10, "result"),
        ]
        summary = next(f for f in files if f["name"] == "reports/summary.md")
        download = await client.get(f"{base}/{summary['id']}", params=params)
        assert download.status_code == 200 and download.content == b"# Summary\n"
        assert "filename*=UTF-8''summary.md" in download.headers["content-disposition"]
        # Scoped by workspace and run; problem JSON otherwise.
        for url, query in [
            (base, {"workspaceId": "ws_other"}),
            ("/api/agents/runs/sess_nope/files", params),
            (f"{base}/file_nope", params),
            (f"/api/agents/runs/sess_nope/files/{summary['id']}", params),
        ]:
            missing = await client.get(url, params=query)
            assert missing.status_code == 404, url
            assert missing.headers["content-type"] == "application/problem+json"
        # A chat turn's session is not an agents run.
        run = await server.turn("a chat turn")
        chat_session = run.headers["x-session-id"]
        assert (
            await client.get(f"/api/agents/runs/{chat_session}/files", params=params)
        ).status_code == 404
    async with server.client(auth=False) as client:
        assert (await client.get(base, params=params)).status_code == 401
