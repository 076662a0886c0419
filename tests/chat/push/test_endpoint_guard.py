"""Web Push cannot be aimed inward, over a real chat server's API (the chat test
harness, SQLite and PostgreSQL): every way to name the loopback listener or another
inner host is refused when registered (422 naming the rule) and again when a stored
subscription is pushed (refused, not removed, the listener never reached); a workspace
holds a bounded number of subscriptions (409 past it). The loopback push service is the
operator's allow-listed private push service."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from sandstream.server.chat.model.ids import now_ms
from sandstream.server.chat.model.records import PushSubscription
from sandstream.server.chat.store.sql.push import record_turn_push
from tests.chat.harness import WORKSPACE, ChatServer, plans, sleeping, start_chat_server
from tests.chat.push.devices import pushes_ended, subscribe
from tests.chat.push.inner_hosts import AUTH, P256DH, Listener, tricks
from tests.chat.push.pushing import push_settings
from tests.support.push_services import LoopbackPushService

pytestmark = pytest.mark.usefixtures("chat_database")


@pytest.fixture
async def server(
    nursery: trio.Nursery, tmp_path: Path, push_service: LoopbackPushService
) -> ChatServer:
    settings = push_settings(tmp_path, push_service, poll_interval=0.05)
    return await start_chat_server(
        nursery, tmp_path / "data", agent=plans(slow=sleeping(0.5)), push=settings
    )


@pytest.fixture
async def api(server: ChatServer) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client() as client:
        yield client


def _web_push(endpoint: str) -> dict[str, object]:
    return {
        "workspaceId": WORKSPACE,
        "webPush": {"endpoint": endpoint, "keys": {"p256dh": P256DH, "auth": AUTH}},
    }


async def test_every_way_to_name_an_inner_host_is_refused_when_registered(
    api: httpx.AsyncClient, listener: Listener
) -> None:
    for endpoint, reason in tricks(listener.port).items():
        answer = await api.post("/api/assistant/push/subscriptions", json=_web_push(endpoint))
        assert answer.status_code == 422, (endpoint, answer.text)
        problem = answer.json()
        assert problem["type"] == "urn:sandstream:problem:invalid-body"
        assert problem.get("reason") == reason, (endpoint, problem)
        assert reason in problem["detail"]
    listed = await api.get("/api/assistant/push/subscriptions", params={"workspaceId": WORKSPACE})
    assert listed.json() == {"subscriptions": []}
    assert listener.connections == 0


async def test_subscriptions_stored_before_are_checked_again_when_pushed(
    server: ChatServer,
    api: httpx.AsyncClient,
    push_service: LoopbackPushService,
    listener: Listener,
) -> None:
    """Subscriptions already in the store (registered before the rules, or by another
    replica's allow-list) are checked again at each send: refused, not removed, and
    the allowed device still gets its push."""
    browser, _ = await subscribe(api, push_service)
    stored = list(tricks(listener.port))
    for n, endpoint in enumerate(stored):
        await server.store.add_push_subscription(
            PushSubscription(
                id=f"dev_old{n}",
                workspace_id=WORKSPACE,
                kind="webpush",
                address=endpoint,
                p256dh=P256DH,
                auth=AUTH,
                created_at=now_ms(),
            )
        )
    chat = await server.store.create_chat(
        workspace_id=WORKSPACE, workflow_id=None, title="task", now=now_ms()
    )
    ended = functools.partial(
        record_turn_push, chat_id=chat.id, turn_id=None, status="complete", now=now_ms()
    )
    await server.store.db.write(ended)  # the alert of a turn that ended
    assert await pushes_ended(server.store, 1) == [("alert", "sent")]
    assert len(push_service.delivered_to(browser)) == 1
    states = await server.store.db.read(
        lambda conn: dict(
            conn.execute("SELECT subscription_id, state FROM push_deliveries").fetchall()
        )
    )
    assert {states[f"dev_old{n}"] for n in range(len(stored))} == {"failed"}
    listed = await api.get("/api/assistant/push/subscriptions", params={"workspaceId": WORKSPACE})
    assert len(listed.json()["subscriptions"]) == len(stored) + 1  # refused, not removed
    assert listener.connections == 0


async def test_a_workspace_holds_at_most_its_subscriptions(
    api: httpx.AsyncClient, server: ChatServer
) -> None:
    cap = server.service.settings.push.max_subscriptions
    statuses: dict[int, int] = {}
    problem: dict[str, object] = {}

    async def register(numbers: range) -> None:
        for n in numbers:
            endpoint = f"https://push.example.com/push/{n}"
            answer = await api.post("/api/assistant/push/subscriptions", json=_web_push(endpoint))
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
            if answer.status_code == 409:
                problem.update(answer.json())

    async with trio.open_nursery() as nursery:
        for first in range(0, 2000, 250):  # eight devices registering at once
            nursery.start_soon(register, range(first, first + 250))
    assert statuses == {201: cap, 409: 2000 - cap}
    assert problem["type"] == "urn:sandstream:problem:push-subscription-limit"
    assert problem["limit"] == cap
    again = await api.post(
        "/api/assistant/push/subscriptions", json=_web_push("https://push.example.com/push/0")
    )
    assert again.status_code == 201  # a device it holds registers again
    listed = await api.get("/api/assistant/push/subscriptions", params={"workspaceId": WORKSPACE})
    assert len(listed.json()["subscriptions"]) == cap
    other = await api.post(
        "/api/assistant/push/subscriptions",
        json={**_web_push("https://push.example.com/push/x"), "workspaceId": "ws_other"},
    )
    assert other.status_code == 201  # another workspace has its own
