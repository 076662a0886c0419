"""The push tests' devices and turns, over a chat server's HTTP API: a browser
subscribed with the server's VAPID key and registered, a turn nobody watches (to its
end, or left running), the store's pushes once none waits, and what a browser received."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import trio

from sandstream.server.chat.store.sql import SqlChatStore
from tests.chat.harness import DEADLINE, WORKSPACE
from tests.support.push_services import Browser, LoopbackPushService

__all__ = ["left_turn", "payloads", "pushes_ended", "received", "subscribe", "unwatched_turn"]


async def subscribe(
    client: httpx.AsyncClient, push_service: LoopbackPushService
) -> tuple[Browser, str]:
    """A new browser subscribed with the server's VAPID key and registered with it
    (``client`` carries the API token); returns it and its subscription id."""
    key = (await client.get("/api/assistant/push/vapid-public-key")).json()["publicKey"]
    browser = push_service.subscribe(key)
    subscription = browser.subscription
    response = await client.post(
        "/api/assistant/push/subscriptions",
        json={
            "workspaceId": WORKSPACE,
            "webPush": {
                "endpoint": subscription.endpoint,
                "keys": {"p256dh": subscription.p256dh, "auth": subscription.auth},
            },
        },
    )
    assert response.status_code == 201, response.text
    return browser, response.json()["id"]


async def left_turn(client: httpx.AsyncClient, message: str, chat_id: str | None = None) -> str:
    """Start a turn and leave as soon as it started (it runs on); returns the chat id."""
    body: dict[str, Any] = {"workspaceId": WORKSPACE, "message": message}
    if chat_id is not None:
        body["chatId"] = chat_id
    async with client.stream("POST", "/api/assistant/chat/stream", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                chat_id = msgspec.json.decode(line[5:])["chatId"]
                break
    assert chat_id is not None
    return chat_id


async def unwatched_turn(
    client: httpx.AsyncClient, message: str, chat_id: str | None = None
) -> str:
    """Start a turn, leave as soon as it started, wait until it settled; returns the
    chat id."""
    chat_id = await left_turn(client, message, chat_id)
    with trio.fail_after(DEADLINE):
        while True:
            chat = await client.get(
                f"/api/assistant/chats/{chat_id}", params={"workspaceId": WORKSPACE}
            )
            if "activeMessageId" not in chat.json():
                return chat_id
            await trio.sleep(0.05)


async def pushes_ended(store: SqlChatStore, count: int) -> list[tuple[str, str]]:
    """Wait until ``count`` pushes were recorded and none waits; their kinds and states."""

    def read(conn: Any) -> list[tuple[str, str]]:
        rows = conn.execute("SELECT kind, state FROM pending_pushes ORDER BY created_at, id")
        return [(row[0], row[1]) for row in rows]

    with trio.fail_after(DEADLINE):
        while True:
            rows = await store.db.read(read)
            if len(rows) >= count and all(state != "pending" for _, state in rows):
                return rows
            await trio.sleep(0.05)


def payloads(push_service: LoopbackPushService, browser: Browser) -> list[dict[str, Any]]:
    """The JSON of each push message ``browser`` received, oldest first."""
    return [msgspec.json.decode(d.plaintext) for d in push_service.delivered_to(browser)]


async def received(
    push_service: LoopbackPushService, browser: Browser, count: int
) -> list[dict[str, Any]]:
    """Wait until ``browser`` received ``count`` push messages; their JSON."""
    with trio.fail_after(DEADLINE):
        while len(push_service.delivered_to(browser)) < count:
            await trio.sleep(0.05)
    return payloads(push_service, browser)
