"""Permission grants that last for the chat: an ``always`` answer is kept as the chat's
grant, the chat's next turns answer the same request without asking (``by: "grant"``),
and ``GET``/``DELETE /api/assistant/chats/{chatId}/grants`` list and revoke them. Real
server, real sandboxes, real containers running the scripted agent, on each database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

from sandstream.core.schemas import ScriptedAgent, ScriptedStep
from sandstream.core.sse_parser import ServerSentEvent
from tests.chat.harness import (
    DEADLINE,
    WORKSPACE,
    ChatServer,
    EventReader,
    persisted_form,
    plans,
    start_chat_server,
)

pytestmark = pytest.mark.usefixtures("chat_database")

PARAMS = {"workspaceId": WORKSPACE}
OTHER = {"workspaceId": "another-workspace"}

AGENT = plans(
    ask=ScriptedAgent(
        steps=[ScriptedStep(tool="run_shell", args={"command": "echo ran"}, ask=True)],
        message="asked: {prompt}",
    )
)


@pytest.fixture
async def server(nursery: trio.Nursery, tmp_path: Path) -> ChatServer:
    return await start_chat_server(nursery, tmp_path / "data", agent=AGENT)


def _data(event: ServerSentEvent) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.json.decode(event.data)
    return data


def _pending(event: ServerSentEvent) -> bool:
    return event.event == "permission" and _data(event)["status"] == "pending"


def _permissions(events: list[ServerSentEvent]) -> list[dict[str, Any]]:
    return [_data(e) for e in events if e.event == "permission"]


async def _grants(server: ChatServer, chat_id: str, params: dict[str, str]) -> httpx.Response:
    async with server.client() as client:
        return await client.get(f"/api/assistant/chats/{chat_id}/grants", params=params)


async def _revoke(
    server: ChatServer, chat_id: str, grant_id: str, params: dict[str, str]
) -> httpx.Response:
    async with server.client() as client:
        return await client.delete(
            f"/api/assistant/chats/{chat_id}/grants/{grant_id}", params=params
        )


async def _asked_and_answered(
    server: ChatServer, body: dict[str, Any], reply: str
) -> tuple[str, list[ServerSentEvent]]:
    """A turn that asks: answered ``reply``, read to its end; its chat and events."""
    async with server.stream(body) as response:
        assert response.status_code == 200
        reader = EventReader(response)
        with trio.fail_after(DEADLINE):
            asked = _data(await reader.until(_pending))
            chat_id: str = _data(reader.events[0])["chatId"]
            async with server.client() as client:
                answered = await client.post(
                    f"/api/assistant/chats/{chat_id}/permissions/{asked['id']}",
                    params=PARAMS,
                    json={"reply": reply},
                )
            assert answered.status_code == 200, answered.text
            while await reader.next() is not None:
                pass
    return chat_id, reader.events


async def _settled(server: ChatServer, chat_id: str) -> dict[str, Any]:
    chat = await server.wait_chat(chat_id, lambda c: "activeMessageId" not in c)
    message: dict[str, Any] = chat["messages"][-1]
    return message


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in message["content"] if b["type"] == "permission"]


async def test_always_is_kept_for_the_chat_until_revoked(server: ChatServer) -> None:
    body = {"workspaceId": WORKSPACE, "message": "ask first"}
    chat_id, events = await _asked_and_answered(server, body, "always")
    first = await _settled(server, chat_id)
    [pending, resolved] = _permissions(events)
    assert pending["tool_kind"] == "run_shell" and pending["title"] == "Run run_shell?"
    assert resolved["reply"] == "always" and "by" not in resolved
    listed = await _grants(server, chat_id, PARAMS)
    assert listed.status_code == 200, listed.text
    [grant] = listed.json()["grants"]
    assert grant == {
        "id": grant["id"], "kind": "run_shell", "title": "Run run_shell?",
        "createdAt": grant["createdAt"], "messageId": first["id"],
    }  # fmt: skip

    # Another workspace sees no such chat: it can neither list nor revoke.
    assert (await _grants(server, chat_id, OTHER)).status_code == 404
    assert (await _revoke(server, chat_id, grant["id"], OTHER)).status_code == 404
    assert len((await _grants(server, chat_id, PARAMS)).json()["grants"]) == 1

    # Turn 2: the same request is answered by the grant; nobody answers here.
    with trio.fail_after(DEADLINE):
        second = await server.turn("ask again", chat_id=chat_id)
    assert second.kinds[-2:] == ["result", "done"]
    [pending, resolved] = second.data("permission")
    assert pending["status"] == "pending" and pending["title"] == "Run run_shell?"
    assert resolved == {
        "type": "permission", "id": pending["id"], "status": "resolved", "reply": "always",
        "by": "grant", "ts": resolved["ts"],
    }  # fmt: skip
    [step] = [s for s in second.data("step") if s["status"] != "running"]
    assert step["status"] == "succeeded" and "ran" in step["result"]["stdout"]
    stored = await _settled(server, chat_id)
    assert stored == persisted_form(second.events, stored)
    [block] = _blocks(stored)
    assert block["reply"] == "always" and block["by"] == "grant"
    assert block["toolKind"] == "run_shell"
    # A grant's answer records no second grant.
    assert [g["id"] for g in (await _grants(server, chat_id, PARAMS)).json()["grants"]] == [
        grant["id"]
    ]

    # Revoked: turn 3 asks again; "once" records no grant.
    assert (await _revoke(server, chat_id, grant["id"], PARAMS)).status_code == 204
    gone = await _revoke(server, chat_id, grant["id"], PARAMS)
    assert gone.status_code == 404
    assert gone.json()["type"] == "urn:sandstream:problem:not-found"
    body = {"workspaceId": WORKSPACE, "message": "ask third", "chatId": chat_id}
    _, events = await _asked_and_answered(server, body, "once")
    assert [p.get("by") for p in _permissions(events)] == [None, None]
    await _settled(server, chat_id)
    assert (await _grants(server, chat_id, PARAMS)).json()["grants"] == []


async def test_grants_of_a_chat_that_is_not_there(server: ChatServer) -> None:
    async with server.client() as client:
        created = await client.post("/api/assistant/chats", json={"workspaceId": WORKSPACE})
        chat_id = created.json()["id"]
        assert (await _grants(server, chat_id, PARAMS)).json() == {"grants": []}
        assert (await _revoke(server, chat_id, "grant_nosuchgrant", PARAMS)).status_code == 404
        assert (await _grants(server, "chat_nosuchchat", PARAMS)).status_code == 404
        deleted = await client.delete(f"/api/assistant/chats/{chat_id}", params=PARAMS)
        assert deleted.status_code == 204
        assert (await _grants(server, chat_id, PARAMS)).status_code == 404
        bad = await _revoke(server, chat_id, "not an id!", PARAMS)
        assert bad.status_code == 422
