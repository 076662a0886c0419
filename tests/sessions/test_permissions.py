"""Permission answers through ``POST /sessions/{id}/message``: the session hands them to
the container's stdin in order with the messages; the first answer per request wins.
A real runner, real containers, the scripted agent asking before its steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.core import StreamProcessor
from sandstream.core.envelope import LIVE_EXTENSION
from sandstream.core.schemas import ScriptedStep
from sandstream.server.sessions import Session
from tests.server.harness import scripted
from tests.sessions.harness import create, read_all, session_service, start_sessions, wait_state

ASKING = ScriptedStep(tool="run_shell", args={"command": "echo ran"}, ask=True)


def parse_stream(body: bytes) -> list[dict[str, Any]]:
    """The lines of a live session's whole output, each one valid to the core (with the
    ``live`` extension) and forwarded unchanged, the last one its terminal."""
    processor = StreamProcessor(mode="ndjson", extensions=(LIVE_EXTENSION,))
    assert processor.feed(body) == body
    assert processor.turn.diagnostic_count == 0, processor.turn.diagnostics
    assert processor.ended
    lines: list[dict[str, Any]] = [msgspec.json.decode(line) for line in body.splitlines()]
    assert lines[-1]["type"] in ("result", "error")
    return lines


async def _asked(session: Session, count: int) -> list[str]:
    """The ids of the session's permission requests, once ``count`` were asked (as
    the runner's core folded them: a reader of the stream sees them from then on)."""
    with trio.fail_after(60):
        while True:
            assert session.turn is not None
            asked = list(session.turn.processor.turn.permissions)
            if len(asked) >= count:
                return asked
            await trio.sleep(0.01)


async def _post(client: httpx.AsyncClient, session_id: str, body: Any) -> httpx.Response:
    return await client.post(f"/sessions/{session_id}/message", json=body)


async def test_answers_reach_the_agent_in_order_and_the_first_wins(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = scripted(ASKING, ASKING, message="Done.")
    dispatch = {**workspace.mint_dispatch("go"), "extensions": [LIVE_EXTENSION]}
    async with server.client() as client:
        session_id = await create(client, dispatch)
        session = session_service(server).get(session_id)
        [first] = await _asked(session, 1)
        unknown = await _post(
            client, session_id, {"type": "permission", "id": "perm_x", "reply": "once"}
        )
        assert unknown.status_code == 404
        assert unknown.json()["type"] == "urn:sandstream:problem:permission-not-found"
        assert unknown.json()["request_id"] == "perm_x"  # the session API's casing
        for bad in (
            {"type": "permission", "id": first, "reply": "sure"},
            {"type": "permission", "id": first},
            {"type": "permission", "reply": "once"},
            {"type": "permission", "id": first, "reply": "once", "text": "x"},
            {"type": "message", "id": first, "reply": "once"},
            {"type": "question", "text": "x"},
        ):
            refused = await _post(client, session_id, bad)
            assert refused.status_code == 422, bad
            assert refused.headers["Content-Type"] == "application/problem+json"
        # A message and the answer go to stdin in the order they were posted.
        assert (await _post(client, session_id, {"text": "before the answer"})).status_code == 200
        answer = {"type": "permission", "id": first, "reply": "once"}
        assert (await _post(client, session_id, answer)).status_code == 200
        again = await _post(client, session_id, {**answer, "reply": "reject"})
        assert again.status_code == 409
        assert again.json()["type"] == "urn:sandstream:problem:permission-answered"
        assert again.json()["request_id"] == first
        [_, second] = await _asked(session, 2)
        answer = {"type": "permission", "id": second, "reply": "reject"}
        assert (await _post(client, session_id, answer)).status_code == 200
        await wait_state(client, session_id, "completed")
        late = await _post(client, session_id, answer)
        assert late.status_code == 409
        assert late.json()["type"] == "urn:sandstream:problem:session-ended"
    lines = parse_stream(b"".join((await read_all(server, session_id)).chunks))
    permissions = [(line["id"], line["status"], line.get("reply")) for line in lines
                   if line["type"] == "permission"]  # fmt: skip
    assert permissions == [
        (first, "pending", None),
        (first, "resolved", "once"),
        (second, "pending", None),
        (second, "resolved", "reject"),
    ]
    ended = [line for line in lines if line["type"] == "step" and line["status"] != "running"]
    assert [line["status"] for line in ended] == ["succeeded", "failed"]
    assert ended[1]["error"] == "rejected by the user"
    # The message was taken (before the second step: the agent takes them before each).
    messages = [line["message"] for line in lines if line["type"] == "log"]
    assert "user message: before the answer" in messages
    # Live text: the deltas fold to the result.
    deltas = "".join(line["text"] for line in lines if line["type"] == "delta")
    assert deltas == lines[-1]["message"] == "Done."


async def test_without_the_live_extension_nobody_is_asked(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = scripted(ASKING, message="Done.")
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("go"))
        await wait_state(client, session_id, "completed")
    lines = parse_stream(b"".join((await read_all(server, session_id)).chunks))
    assert {line["type"] for line in lines} == {"log", "step", "result"}  # strict
    [failed] = [line for line in lines if line["type"] == "step" and line["status"] == "failed"]
    assert failed["error"].startswith("rejected: nobody can answer")
    assert any("nobody can answer" in line.get("message", "") for line in lines)


async def test_an_interrupt_resolves_pending_requests_cancelled(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = scripted(ASKING)
    dispatch = {**workspace.mint_dispatch("go"), "extensions": [LIVE_EXTENSION]}
    async with server.client() as client:
        session_id = await create(client, dispatch)
        [asked] = await _asked(session_service(server).get(session_id), 1)
        stopped = await client.post(f"/sessions/{session_id}/interrupt")
        assert stopped.status_code == 200
        late = await _post(client, session_id, {"type": "permission", "id": asked, "reply": "once"})
        assert late.status_code == 409
    lines = parse_stream(b"".join((await read_all(server, session_id)).chunks))
    assert [(line["type"], line.get("reply") or line.get("code")) for line in lines[-2:]] == [
        ("permission", "cancelled"),
        ("error", "interrupted"),
    ]
