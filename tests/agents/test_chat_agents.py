"""The five real ACP agents, each through a real ``sandstream serve`` chat turn in a real
bubblewrap sandbox, against the stand-in model server on loopback.

A turn streams its text as ``delta`` events before the result; an agent that asks
(Claude Code, OpenCode, Gemini CLI) is answered through the chat's permission route;
the stored message is the live fold; an interrupt mid-tool leaves no process; a chat
goes on with the agent's own session and files on another replica and runner, and after
a restart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec
import pytest
import trio

from benchmarks.support.model_server import ModelScript, ModelServer, start_model_server
from benchmarks.support.postgres_server import PostgresServer
from sandstream.container.agents.acp.session import SESSION_STEP
from sandstream.core.schemas import AcpPreset
from sandstream.core.sse_parser import ServerSentEvent
from tests.chat.databases import one_database
from tests.chat.harness import (
    WORKSPACE,
    EventReader,
    ServeProcess,
    allow,
    descendants,
    persisted_form,
    start_serve_process,
)
from tests.support.agents import ASKING, PRESETS, WRITE, acp_spec

TEXT: Final = ("The file ", "says hello", " from the tool.")
DEADLINE: Final = 120.0
PARAMS: Final = {"workspaceId": WORKSPACE}


def _config(preset: AcpPreset, model: ModelServer) -> dict[str, Any]:
    config: dict[str, Any] = msgspec.to_builtins({"agent": acp_spec(preset, model)})
    return config


def _data(event: ServerSentEvent) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.json.decode(event.data)
    return data


def _pending(event: ServerSentEvent) -> bool:
    return event.event == "permission" and _data(event)["status"] == "pending"


async def _serve(
    nursery: trio.Nursery, tmp_path: Path, config: dict[str, Any], model: ModelServer
) -> ServeProcess:
    """``sandstream serve``, its isolated sandboxes allowed to reach ``model``; no warm
    pool (every process the server has is then a turn's)."""
    data_dir = tmp_path / "data"
    allowed = [arg for endpoint in allow(model) for arg in ("--sandbox-allow", str(endpoint))]
    return await start_serve_process(nursery, data_dir, config, *allowed, "--warm-pool", "0")


def _client(served: ServeProcess, tmp_path: Path) -> httpx.AsyncClient:
    token = (tmp_path / "data" / "api-token").read_text().strip()
    client = served.client(token)
    client.timeout = httpx.Timeout(DEADLINE)
    return client


@dataclass(frozen=True)
class _Turn:
    """A chat turn run to its end: its chat, its events, the permission request it
    answered ``once`` (``None`` if the agent asked none) and the chat as stored after."""

    chat_id: str
    events: list[ServerSentEvent]
    asked: dict[str, Any] | None
    chat: dict[str, Any]


async def _turn(
    client: httpx.AsyncClient,
    preset: AcpPreset,
    message: str,
    chat_id: str | None = None,
    *,
    reply: str | None = "once",
) -> _Turn:
    """One chat turn to its end, answering ``reply`` when an agent that asks asks (with
    ``reply`` None, it must not need an answer), and the chat settled."""
    body = {"workspaceId": WORKSPACE, "message": message}
    if chat_id is not None:
        body["chatId"] = chat_id
    asked = None
    async with client.stream("POST", "/api/assistant/chat/stream", json=body) as response:
        assert response.status_code == 200, await response.aread()
        reader = EventReader(response)
        chat_id = str(_data(await reader.until(lambda e: e.event == "start"))["chatId"])
        with trio.fail_after(DEADLINE):
            if preset in ASKING and reply is not None:
                asked = _data(await reader.until(_pending))
                answer = await client.post(
                    f"/api/assistant/chats/{chat_id}/permissions/{asked['id']}",
                    params=PARAMS,
                    json={"reply": reply},
                )
                assert answer.status_code == 200, answer.text
            await reader.until(lambda e: e.event == "done")
    with trio.fail_after(DEADLINE):
        while "activeMessageId" in (chat := await _chat(client, chat_id)):
            await trio.sleep(0.1)
    kinds = [e.event for e in reader.events]
    assert kinds[-2:] == ["result", "done"], kinds
    return _Turn(chat_id, reader.events, asked, chat)


async def _chat(client: httpx.AsyncClient, chat_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/assistant/chats/{chat_id}", params=PARAMS)
    assert response.status_code == 200, response.text
    chat: dict[str, Any] = response.json()
    return chat


@pytest.mark.parametrize("preset", PRESETS)
async def test_a_chat_turn_streams_live_text_and_takes_an_answer(
    nursery: trio.Nursery, tmp_path: Path, preset: AcpPreset
) -> None:
    model = await start_model_server(nursery, ModelScript(command=WRITE, text=TEXT))
    served = await _serve(nursery, tmp_path, _config(preset, model), model)
    async with _client(served, tmp_path) as client:
        turn = await _turn(client, preset, "Write the file")
    events, asked, chat = turn.events, turn.asked, turn.chat
    kinds = [e.event for e in events]
    [result] = [_data(e) for e in events if e.event == "result"]
    assert result["message"].endswith("".join(TEXT))
    text = [_data(e) for e in events if e.event == "delta" and _data(e)["kind"] == "text"]
    assert "".join(d["text"] for d in text) == result["message"]
    assert kinds.index("delta") < kinds.index("result")
    steps = [_data(e) for e in events if e.event == "step" and _data(e)["name"] != SESSION_STEP]
    done = [s for s in steps if s["status"] != "running"]
    assert done and done[-1]["status"] == "succeeded", steps
    if preset != "gemini":  # gemini reports neither the input nor the output of a command
        assert "hello-from-tool" in msgspec.json.encode(done[-1]).decode()
    assert any("hello-from-tool" in r for r in model.tool_results())
    if preset in ASKING:
        assert asked is not None
        resolved = [_data(e) for e in events if e.event == "permission"][-1]
        assert (resolved["id"], resolved["status"], resolved["reply"]) == (
            asked["id"],
            "resolved",
            "once",
        )
        assert asked["step"] == steps[0]["id"]
    stored = chat["messages"][-1]
    assert stored["status"] == "complete"
    assert stored == persisted_form(events, stored)
    assert [b for b in stored["content"] if b["type"] == "text"] == [
        {"type": "text", "text": result["message"]}
    ]


async def test_an_interrupt_mid_tool_ends_the_agent_and_its_tool(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Claude Code does not exit when its stdin closes: the sandbox must end it."""
    model = await start_model_server(nursery, ModelScript(command="sleep 397"))
    config = _config("claude", model)
    config["agent"]["mode"] = "bypassPermissions"
    served = await _serve(nursery, tmp_path, config, model)
    body = {"workspaceId": WORKSPACE, "message": "Sleep"}
    async with (
        _client(served, tmp_path) as client,
        client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
    ):
        reader = EventReader(response)
        chat_id = _data(await reader.until(lambda e: e.event == "start"))["chatId"]
        with trio.fail_after(DEADLINE):
            while not _running(served, "sleep 397"):
                await trio.sleep(0.05)
        assert _running(served, "claude")
        stopped = await client.post(f"/api/assistant/chats/{chat_id}/interrupt", params=PARAMS)
        assert stopped.status_code == 200, stopped.text
        assert stopped.json()["message"]["status"] == "interrupted"
    with trio.fail_after(DEADLINE):
        while descendants(served.process.pid):
            await trio.sleep(0.05)


def _running(served: ServeProcess, needle: str) -> bool:
    """Whether a descendant of the server has ``needle`` in its command line."""
    for pid in descendants(served.process.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if needle.encode() in cmdline:
            return True
    return False


COUNT: Final = "cat notes.txt 2>/dev/null; echo line >> notes.txt; wc -l < notes.txt"
"""Prints the notes so far (none on the first turn), adds a line, prints the count."""
RESUME, LOAD, NEW = "session/resume", "session/load", "session/new"
CONTINUING: Final[dict[AcpPreset, tuple[list[str], str]]] = {
    "claude": ([RESUME, LOAD, NEW], RESUME),
    "codex": ([RESUME, LOAD, NEW], RESUME),
    "opencode": ([RESUME, LOAD, NEW], RESUME),
    "gemini": ([LOAD, NEW], LOAD),
    "pi": ([LOAD, NEW], LOAD),
}
"""The ways each agent's second turn tries (what it advertises) and the one used: the
first. (The turns of the test mostly begin in the minute the session began: Gemini CLI
loads its session then too, its files renamed: ``gemini_sessions``.)"""


CHANGED: Final[dict[AcpPreset, str]] = {
    "claude": "claude-haiku-4-5",
    "codex": "gpt-5.4",
    "opencode": "other-model",
    "gemini": "gemini-other",
    "pi": "other-model",
}
"""The model a chat's third turn chooses instead (one each agent knows)."""


@pytest.mark.parametrize("preset", PRESETS)
async def test_the_agent_goes_on_with_its_session_and_files_on_any_replica_and_after_a_restart(
    nursery: trio.Nursery, tmp_path: Path, postgres_server: PostgresServer, preset: AcpPreset
) -> None:
    """Turn 1 on one replica, turn 2 on another (each with its own runner; one
    PostgreSQL store), turn 3 on the first one restarted with another model chosen:
    each later turn opens the agent's own session the way it advertises and finds the
    notes of every turn, and turn 3's session asks the model chosen now. An agent that
    asks is answered ``always`` in turn 1, so turn 2's same command runs by the chat's
    grant without asking; revoked, turn 3 asks again."""
    model = await start_model_server(nursery, ModelScript(command=COUNT, text=TEXT))
    config = _config(preset, model)
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir()
    other.mkdir()
    ways, way = CONTINUING[preset]
    with one_database(postgres_server, one / "data", other / "data"):
        first = await _serve(nursery, one, config, model)
        second = await _serve(nursery, other, config, model)
        async with _client(first, one) as client:
            chat_id = (await _turn(client, preset, "Count the notes", reply="always")).chat_id
        [first_result] = model.tool_results()
        first_turn = len(model.generations())
        async with _client(second, other) as client:
            events = (await _turn(client, preset, "Count them again", chat_id, reply=None)).events
            if preset in ASKING:
                granted = [_data(e) for e in events if e.event == "permission"]
                assert [(p["status"], p.get("reply"), p.get("by")) for p in granted] == [
                    ("pending", None, None),
                    ("resolved", "always", "grant"),
                ], granted
                await _revoke_every_grant(client, chat_id)
        _check_continued(events, model.tool_results(), ways, way, lines=2)
        later = [
            request.conversation
            for request in model.generations()[first_turn:]
            if request.conversation is not None
        ]
        if way != NEW:  # the call and its result came as history, not as a preamble
            assert any(first_result in c.tool_results for c in later), (
                first_result,
                [c.tool_results for c in later],
            )
        await first.stop()
        third_turn = len(model.generations())
        changed = {**config, "model": CHANGED[preset]}
        restarted = await _serve(nursery, one, changed, model)
        async with _client(restarted, one) as client:
            events = (await _turn(client, preset, "And once more", chat_id)).events
        _check_continued(events, model.tool_results(), ways, way, lines=3)
        asked = {
            request.conversation.model
            for request in model.generations()[third_turn:]
            if request.conversation is not None and request.conversation.tools
        }
        assert asked == {CHANGED[preset]}, asked


async def _revoke_every_grant(client: httpx.AsyncClient, chat_id: str) -> None:
    """Revoke the chat's one grant (its ``always`` of turn 1); none is left."""
    grants = f"/api/assistant/chats/{chat_id}/grants"
    [grant] = (await client.get(grants, params=PARAMS)).json()["grants"]
    revoked = await client.delete(f"{grants}/{grant['id']}", params=PARAMS)
    assert revoked.status_code == 204, revoked.text
    assert (await client.get(grants, params=PARAMS)).json()["grants"] == []


def _check_continued(
    events: list[ServerSentEvent], results: list[str], ways: list[str], way: str, *, lines: int
) -> None:
    """The turn opened the agent's session by ``way`` after offering ``ways``, and the
    agent's shell counted ``lines`` notes (one per turn so far)."""
    opened = [_data(e) for e in events if e.event == "step" and _data(e)["name"] == SESSION_STEP]
    assert [(step["status"], step.get("args"), step.get("result")) for step in opened] == [
        ("running", {"ways": ways}, None),
        ("succeeded", None, {"way": way, "continued": way != NEW}),
    ], opened
    assert re.search(rf"\bline\s+{lines}\b", results[-1]), results
