"""The delayed push, end to end: a real chat server with the embedded runner, push
subscriptions registered over its API, the loopback Web Push service as the browsers'
push service. A turn whose end a viewer saw pushes nobody; one nobody watched pushes
every device once, with the chat's collapse key; a turn whose server died, settled by
the lost-turn sweep, pushes as a failed one; a gone subscription is removed; an opened
alert is dismissed on the other devices."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec
import pytest
import trio

from sandstream.server.chat.push.notification import web_push_topic
from tests.chat.harness import (
    WORKSPACE,
    ChatServer,
    begin_dead_turn,
    plans,
    sleeping,
    start_chat_server,
)
from tests.chat.push.devices import payloads, pushes_ended, subscribe, unwatched_turn
from tests.chat.push.pushing import push_settings
from tests.support.push_services import LoopbackPushService

pytestmark = pytest.mark.usefixtures("chat_database")

DELAY = 0.5
"""The push delay of these tests' servers (seconds)."""


@pytest.fixture
async def api(server: ChatServer) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the server with the API token."""
    async with server.client() as client:
        yield client


@pytest.fixture
async def server(
    nursery: trio.Nursery, tmp_path: Path, push_service: LoopbackPushService
) -> ChatServer:
    settings = push_settings(tmp_path, push_service, delay=DELAY, poll_interval=0.05)
    return await start_chat_server(
        nursery,
        tmp_path / "data",
        agent=plans(slow=sleeping(0.5)),
        push=settings,
        sweep_interval=0.2,  # the lost-turn sweep
    )


async def test_a_turn_a_viewer_saw_end_pushes_nobody(
    server: ChatServer, api: httpx.AsyncClient, push_service: LoopbackPushService
) -> None:
    phone, _ = await subscribe(api, push_service)
    laptop, _ = await subscribe(api, push_service)
    run = await server.turn("hello")
    assert run.status == 200
    assert await pushes_ended(server.store, 1) == [("alert", "dropped")]
    assert push_service.deliveries == []
    assert push_service.attempts[phone.subscription.endpoint] == 0
    assert push_service.attempts[laptop.subscription.endpoint] == 0


async def test_a_turn_nobody_watched_pushes_every_device_once(
    server: ChatServer, api: httpx.AsyncClient, push_service: LoopbackPushService
) -> None:
    phone, phone_id = await subscribe(api, push_service)
    laptop, laptop_id = await subscribe(api, push_service)
    chat_id = await unwatched_turn(api, "slow list the files")
    assert await pushes_ended(server.store, 1) == [("alert", "sent")]
    for browser, subscription_id in ((phone, phone_id), (laptop, laptop_id)):
        [delivery] = push_service.delivered_to(browser)
        [shown] = payloads(push_service, browser)
        assert shown["title"] == "Done"
        assert shown["body"] == "slow list the files"
        assert shown["tag"] == f"chat-{chat_id}"
        assert shown["data"]["chatId"] == chat_id
        assert shown["data"]["subscriptionId"] == subscription_id
        assert delivery.topic == web_push_topic(f"chat-{chat_id}")
        assert delivery.urgency == "high"

    await unwatched_turn(api, "slow again", chat_id)
    await pushes_ended(server.store, 2)
    for browser in (phone, laptop):
        first, second = push_service.delivered_to(browser)
        assert first.topic == second.topic
        assert [p["tag"] for p in payloads(push_service, browser)] == [f"chat-{chat_id}"] * 2


async def test_a_turn_its_server_lost_pushes_as_a_failed_one(
    server: ChatServer, api: httpx.AsyncClient, push_service: LoopbackPushService
) -> None:
    phone, _ = await subscribe(api, push_service)
    # A turn of a server that died: its lock expires at once and nobody renews it.
    dead = await begin_dead_turn(server.store, "lost in a crash", lease_ms=200)
    assert await pushes_ended(server.store, 1) == [("alert", "sent")]
    [alert] = payloads(push_service, phone)
    assert (alert["title"], alert["body"]) == ("Failed", "lost in a crash")
    assert alert["tag"] == f"chat-{dead.chat.id}"
    lost = (await server.store.get_messages(WORKSPACE, dead.chat.id))[-1]
    assert (lost.status, msgspec.to_builtins(lost.content[-1])["code"]) == ("failed", "turn_lost")


async def test_a_gone_subscription_is_removed(
    server: ChatServer, api: httpx.AsyncClient, push_service: LoopbackPushService
) -> None:
    phone, phone_id = await subscribe(api, push_service)
    laptop, laptop_id = await subscribe(api, push_service)
    push_service.unsubscribe(laptop)
    await unwatched_turn(api, "slow work")
    await pushes_ended(server.store, 1)
    assert len(push_service.delivered_to(phone)) == 1
    assert push_service.attempts[laptop.subscription.endpoint] == 1
    async with server.client() as client:
        listed = await client.get(
            "/api/assistant/push/subscriptions", params={"workspaceId": WORKSPACE}
        )
    assert [s["id"] for s in listed.json()["subscriptions"]] == [phone_id]
    assert laptop_id != phone_id


async def test_an_opened_alert_is_dismissed_on_the_other_devices(
    server: ChatServer, api: httpx.AsyncClient, push_service: LoopbackPushService
) -> None:
    phone, phone_id = await subscribe(api, push_service)
    laptop, _ = await subscribe(api, push_service)
    chat_id = await unwatched_turn(api, "slow work")
    await pushes_ended(server.store, 1)
    [alert] = payloads(push_service, phone)
    data = alert["data"]
    async with server.client(auth=False) as client:  # a service worker has no API token
        response = await client.post(
            "/api/assistant/push/ack",
            json={
                "workspaceId": WORKSPACE,
                "chatId": chat_id,
                "pushId": data["pushId"],
                "subscriptionId": phone_id,
                "opened": True,
                "token": data["ackToken"],
            },
        )
        assert response.status_code == 204, response.text
        forged = await client.post(
            "/api/assistant/push/ack",
            json={"workspaceId": WORKSPACE, "chatId": chat_id, "pushId": data["pushId"]},
        )
        assert forged.status_code == 401
    assert await pushes_ended(server.store, 2) == [("alert", "sent"), ("dismiss", "sent")]
    assert len(push_service.delivered_to(phone)) == 1
    alert_to_laptop, dismiss = payloads(push_service, laptop)
    assert dismiss["silent"] is True
    assert dismiss["tag"] == alert_to_laptop["tag"] == f"chat-{chat_id}"
    assert dismiss["data"]["kind"] == "dismiss"
    first, second = push_service.delivered_to(laptop)
    assert first.topic == second.topic
