"""A permission request waiting for an answer notifies, end to end: a real chat server
(SQLite and PostgreSQL), the scripted agent asking before its step, browsers
subscribed through the loopback Web Push service. A question nobody saw pushes every
device once, under its own collapse key, and its answer dismisses it; one a viewer
handed out (live, or joining later) pushes nobody; one answered within the delay
pushes nobody. On a remote runner too (the log mover folds the session itself)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

from benchmarks.support.runner_process import start_runner_process
from sandstream.core.schemas import ScriptedAgent, ScriptedStep
from sandstream.core.sse_parser import ServerSentEvent
from sandstream.server.chat.push.settings import PushSettings
from sandstream.server.chat.store.sql import SqlChatStore
from tests.chat.harness import (
    DEADLINE,
    RUNNER_TOKEN,
    WORKSPACE,
    ChatServer,
    EventReader,
    plans,
    start_chat_server,
)
from tests.chat.push.devices import left_turn, pushes_ended, received, subscribe
from tests.chat.push.pushing import push_settings
from tests.support.push_services import LoopbackPushService

pytestmark = pytest.mark.usefixtures("chat_database")

DELAY = 2.0
"""The push delay of these tests' servers (seconds): time for a viewer to join."""
PARAMS = {"workspaceId": WORKSPACE}
AGENT = plans(
    ask=ScriptedAgent(
        steps=[
            ScriptedStep(
                tool="run_shell", args={"command": "echo ran", "timeout_sec": 60}, ask=True
            )
        ],
        message="asked: {prompt}",
    )
)


def _settings(tmp_path: Path, push_service: LoopbackPushService) -> PushSettings:
    return push_settings(tmp_path, push_service, delay=DELAY, poll_interval=0.05)


@pytest.fixture
async def server(
    nursery: trio.Nursery, tmp_path: Path, push_service: LoopbackPushService
) -> ChatServer:
    return await start_chat_server(
        nursery, tmp_path / "data", agent=AGENT, push=_settings(tmp_path, push_service)
    )


@pytest.fixture
async def api(server: ChatServer) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client() as client:
        yield client


def _data(event: ServerSentEvent) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.json.decode(event.data)
    return data


def _pending(event: ServerSentEvent) -> bool:
    return event.event == "permission" and _data(event)["status"] == "pending"


async def _answer(api: httpx.AsyncClient, chat_id: str, request_id: str) -> None:
    response = await api.post(
        f"/api/assistant/chats/{chat_id}/permissions/{request_id}",
        params=PARAMS,
        json={"reply": "once"},
    )
    assert response.status_code == 200, response.text


async def _to_the_end(reader: EventReader) -> None:
    with trio.fail_after(DEADLINE):
        while await reader.next() is not None:
            pass


async def question(store: SqlChatStore, *, ended: bool = False) -> dict[str, Any]:
    """The one permission alert, once recorded (``ended``: once no longer waiting)."""

    def read(conn: Any) -> list[Any]:
        return list(
            conn.execute(
                "SELECT permission_id, state, seen_at FROM pending_pushes "
                "WHERE permission_id IS NOT NULL"
            ).fetchall()
        )

    with trio.fail_after(DEADLINE):
        while True:
            rows = await store.db.read(read)
            if rows and (not ended or rows[0][1] != "pending"):
                [(permission_id, state, seen_at)] = rows
                return {"permission_id": permission_id, "state": state, "seen_at": seen_at}
            await trio.sleep(0.05)


async def _a_question_nobody_saw(server: ChatServer, push_service: LoopbackPushService) -> None:
    """Nobody watches an asking turn: every device gets the question; answering it
    dismisses it on every device; then the turn's end is pushed."""
    async with server.client() as api:
        phone, _ = await subscribe(api, push_service)
        laptop, _ = await subscribe(api, push_service)
        chat_id = await left_turn(api, "ask before you run it")
        for browser in (phone, laptop):
            [alert] = await received(push_service, browser, 1)
            assert alert["title"] == "Waiting for your answer"
            assert alert["body"] == "ask before you run it"
            assert alert["tag"] == f"permission-{chat_id}"
            assert alert["data"]["kind"] == "alert"
            assert alert["data"]["chatId"] == chat_id
        assert alert["data"]["permissionId"] == (await question(server.store))["permission_id"]
        await _answer(api, chat_id, alert["data"]["permissionId"])
    # The answer dismisses it on every device; the turn then ends unwatched: its alert.
    for browser in (phone, laptop):
        asked, dismiss, done = await received(push_service, browser, 3)
        assert dismiss["silent"] is True
        assert dismiss["tag"] == asked["tag"] == f"permission-{chat_id}"
        assert dismiss["data"]["kind"] == "dismiss"
        assert dismiss["data"]["pushId"] == asked["data"]["pushId"]
        assert (done["title"], done["tag"]) == ("Done", f"chat-{chat_id}")
    assert await pushes_ended(server.store, 3) == [
        ("alert", "sent"),
        ("dismiss", "sent"),
        ("alert", "sent"),
    ]
    assert len(push_service.deliveries) == 6


async def test_a_question_nobody_saw_pushes_every_device_once_and_its_answer_dismisses_it(
    server: ChatServer, push_service: LoopbackPushService
) -> None:
    await _a_question_nobody_saw(server, push_service)


async def test_on_a_remote_runner_a_question_nobody_saw_pushes_too(
    nursery: trio.Nursery, tmp_path: Path, push_service: LoopbackPushService
) -> None:
    runner = await start_runner_process(
        nursery, "--data-dir", str(tmp_path / "runner-data"), token=RUNNER_TOKEN
    )
    server = await start_chat_server(
        nursery,
        tmp_path / "chat-data",
        embedded=False,
        sandbox_url=runner.url,
        agent=AGENT,
        push=_settings(tmp_path, push_service),
    )
    await _a_question_nobody_saw(server, push_service)


async def test_a_question_a_viewer_handed_out_pushes_nobody(
    server: ChatServer, api: httpx.AsyncClient, push_service: LoopbackPushService
) -> None:
    await subscribe(api, push_service)
    body = {"workspaceId": WORKSPACE, "message": "ask first"}
    async with server.stream(body) as response:
        reader = EventReader(response)
        with trio.fail_after(DEADLINE):
            asked = _data(await reader.until(_pending))
        chat_id = _data(reader.events[0])["chatId"]
        seen = await question(server.store, ended=True)
        assert (seen["permission_id"], seen["state"]) == (asked["id"], "dropped")
        assert seen["seen_at"] is not None
        await _answer(api, chat_id, asked["id"])
        await _to_the_end(reader)
    assert await pushes_ended(server.store, 2) == [("alert", "dropped"), ("alert", "dropped")]
    assert push_service.deliveries == []


async def test_a_viewer_joining_while_a_question_waits_makes_it_seen(
    server: ChatServer, api: httpx.AsyncClient, push_service: LoopbackPushService
) -> None:
    await subscribe(api, push_service)
    chat_id = await left_turn(api, "ask later")
    waiting = await question(server.store)
    assert (waiting["state"], waiting["seen_at"]) == ("pending", None)
    async with api.stream("GET", f"/api/assistant/chats/{chat_id}/stream", params=PARAMS) as joined:
        reader = EventReader(joined)
        with trio.fail_after(DEADLINE):
            asked = _data(await reader.until(_pending))
        assert asked["id"] == waiting["permission_id"]
        seen = await question(server.store, ended=True)
        assert seen["state"] == "dropped" and seen["seen_at"] is not None
        await _answer(api, chat_id, asked["id"])
        await _to_the_end(reader)
    await pushes_ended(server.store, 2)
    assert push_service.deliveries == []


async def test_a_question_answered_within_the_delay_pushes_nobody(
    server: ChatServer, api: httpx.AsyncClient, push_service: LoopbackPushService
) -> None:
    phone, _ = await subscribe(api, push_service)
    chat_id = await left_turn(api, "ask and answer")
    waiting = await question(server.store)
    await _answer(api, chat_id, waiting["permission_id"])
    answered = await question(server.store, ended=True)
    assert (answered["state"], answered["seen_at"]) == ("dropped", None)
    assert await pushes_ended(server.store, 2) == [("alert", "dropped"), ("alert", "sent")]
    [done] = await received(push_service, phone, 1)  # only the turn's end, unwatched
    assert (done["title"], done["tag"]) == ("Done", f"chat-{chat_id}")
