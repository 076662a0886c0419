"""The push outbox's claims on a real chat store (SQLite and PostgreSQL): replicas
sending the same pushes at once send each once; a replica cancelled while it sends a
push gives it up, and another sends it at once to the devices it had not reached (not
to the one it was sending to); a push whose answer never came is not sent again to
that device; a push a service could not take is sent later, once,
whichever replica tries again, and given up after its attempts, with a log line."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from sandstream.server.chat.credentials.stream_tokens import StreamTokens
from sandstream.server.chat.model.ids import now_ms
from sandstream.server.chat.model.records import PushSubscription
from sandstream.server.chat.push.outbox import PushOutbox
from sandstream.server.chat.push.retry import RetryPolicy
from sandstream.server.chat.push.senders import PushSenders
from sandstream.server.chat.push.settings import PushSettings
from sandstream.server.chat.store.sql import SqlChatStore
from tests.chat.databases import open_store
from tests.chat.push.pushing import WORKSPACE, push_settings, register, turn_ended
from tests.support.apns_fcm_services import start_fcm_server
from tests.support.push_services import LoopbackPushService

pytestmark = pytest.mark.usefixtures("chat_database")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlChatStore]:
    opened = await open_store(tmp_path)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def senders(
    tmp_path: Path, push_service: LoopbackPushService
) -> AsyncIterator[tuple[PushSettings, PushSenders]]:
    settings = push_settings(tmp_path, push_service)
    async with PushSenders.open(settings) as opened:
        yield settings, opened


async def push_rows(store: SqlChatStore) -> list[dict[str, Any]]:
    """Every push: its state, attempts and next attempt, and its deliveries' states."""

    def read(conn: Any) -> list[dict[str, Any]]:
        pushes = conn.execute(
            "SELECT id, state, attempts, next_attempt_at FROM pending_pushes "
            "ORDER BY created_at, id"
        ).fetchall()
        rows = []
        for push in pushes:
            deliveries = conn.execute(
                "SELECT subscription_id, state FROM push_deliveries WHERE push_id = ?",
                (push["id"],),
            ).fetchall()
            rows.append(
                {
                    "state": push["state"],
                    "attempts": push["attempts"],
                    "next_attempt_at": push["next_attempt_at"],
                    "deliveries": {d[0]: d[1] for d in deliveries},
                }
            )
        return rows

    return await store.db.read(read)


async def until_ended(store: SqlChatStore, *replicas: PushOutbox) -> list[dict[str, Any]]:
    """Run ``replicas`` until no push waits; the pushes then."""
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for replica in replicas:
                nursery.start_soon(replica.run)
            while any(row["state"] == "pending" for row in await push_rows(store)):
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    return await push_rows(store)


def outbox(
    store: SqlChatStore, settings: PushSettings, senders: PushSenders, owner: str
) -> PushOutbox:
    return PushOutbox(store, settings, senders, StreamTokens("token"), owner=owner)


async def test_two_replicas_send_each_push_once(
    store: SqlChatStore,
    senders: tuple[PushSettings, PushSenders],
    push_service: LoopbackPushService,
    tmp_path: Path,
) -> None:
    settings, opened = senders
    browsers = [await register(store, push_service, opened) for _ in range(3)]
    await turn_ended(store, 8)
    other = await open_store(tmp_path)  # the second replica's own connections
    try:
        replicas = [outbox(store, settings, opened, "a"), outbox(other, settings, opened, "b")]
        with trio.fail_after(60):
            while len(push_service.deliveries) < 8 * len(browsers):
                async with trio.open_nursery() as nursery:
                    for replica in replicas:
                        nursery.start_soon(replica.send_due)
    finally:
        await other.close()
    for browser in browsers:
        tags = [d.topic for d in push_service.delivered_to(browser)]
        assert len(tags) == len(set(tags)) == 8
    assert sum(push_service.attempts.values()) == 8 * len(browsers)


async def test_a_replica_cancelled_while_it_sends_releases_the_push_and_never_resends(
    store: SqlChatStore,
    senders: tuple[PushSettings, PushSenders],
    push_service: LoopbackPushService,
) -> None:
    settings, opened = senders
    settings = dataclasses.replace(settings, workspace_sends=1)  # the phone first, then the laptop
    phone = await register(store, push_service, opened)
    laptop = await register(store, push_service, opened)
    delivered = push_service.hold(phone)  # the phone has it; its answer never comes
    await turn_ended(store, 1)
    first = outbox(store, settings, opened, "a")
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.send_due)
            await delivered.wait()
            nursery.cancel_scope.cancel()
        assert push_service.attempts[laptop.subscription.endpoint] == 0
        assert await outbox(store, settings, opened, "b").send_due() == 1  # released at once
    assert len(push_service.delivered_to(phone)) == 1  # not sent again: it may have had it
    assert len(push_service.delivered_to(laptop)) == 1
    [push] = await push_rows(store)
    assert push["state"] == "sent"
    assert sorted(push["deliveries"].values()) == ["sent", "unknown"]
    assert await outbox(store, settings, opened, "b").send_due() == 0


async def test_a_push_whose_answer_never_came_is_not_sent_again(
    store: SqlChatStore, push_service: LoopbackPushService, tmp_path: Path
) -> None:
    # a send's retries: within half a second, then its request is cut
    settings = push_settings(tmp_path, push_service, claim_lease=1.5)
    async with PushSenders.open(settings) as opened:
        phone = await register(store, push_service, opened)
        laptop = await register(store, push_service, opened)
        push_service.hold(phone)  # the phone has it; its answer never comes
        await turn_ended(store, 1)
        with trio.fail_after(30):
            assert await outbox(store, settings, opened, "a").send_due() == 1
    [push] = await push_rows(store)
    assert push["state"] == "sent"
    assert sorted(push["deliveries"].values()) == ["sent", "unknown"]
    assert len(push_service.delivered_to(phone)) == 1
    assert push_service.attempts[phone.subscription.endpoint] == 1
    assert len(push_service.delivered_to(laptop)) == 1


async def test_a_push_a_service_could_not_take_is_sent_later_once(
    store: SqlChatStore, push_service: LoopbackPushService, tmp_path: Path
) -> None:
    settings = push_settings(
        tmp_path,
        push_service,
        claim_lease=3.0,  # a send's retries: within a second
        later=RetryPolicy(attempts=5, first_delay=0.05, max_delay=0.1, total=60.0),
    )
    async with PushSenders.open(settings) as opened:
        phone = await register(store, push_service, opened)
        laptop = await register(store, push_service, opened)
        push_service.fail(phone, 503, times=1, retry_after="1")  # no time for it in a send
        await turn_ended(store, 1)
        before = now_ms()
        assert await outbox(store, settings, opened, "a").send_due() == 1
        [push] = await push_rows(store)
        assert (push["state"], push["attempts"]) == ("pending", 1)
        assert push["next_attempt_at"] >= before + 1000  # its Retry-After, not sooner
        assert sorted(push["deliveries"].values()) == ["retry", "sent"]
        assert len(push_service.delivered_to(laptop)) == 1
        assert push_service.delivered_to(phone) == []

        other = await open_store(tmp_path)  # a second replica tries again too
        try:
            replicas = [outbox(store, settings, opened, "a"), outbox(other, settings, opened, "b")]
            [push] = await until_ended(store, *replicas)
        finally:
            await other.close()
    assert push["state"] == "sent"
    assert sorted(push["deliveries"].values()) == ["sent", "sent"]
    assert len(push_service.delivered_to(phone)) == 1
    assert len(push_service.delivered_to(laptop)) == 1
    assert push_service.attempts[laptop.subscription.endpoint] == 1


async def test_a_push_that_never_gets_through_is_given_up_with_a_log_line(
    store: SqlChatStore,
    push_service: LoopbackPushService,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = push_settings(
        tmp_path,
        push_service,
        claim_lease=1.5,
        later=RetryPolicy(attempts=3, first_delay=0.05, max_delay=0.1, total=60.0),
    )
    async with PushSenders.open(settings) as opened:
        phone = await register(store, push_service, opened)
        push_service.fail(phone, 503, times=1000)
        await turn_ended(store, 1)
        with caplog.at_level(logging.INFO, logger="sandstream.chat.push"):
            [push] = await until_ended(store, outbox(store, settings, opened, "a"))
    assert push["state"] == "dropped"  # no device had it
    assert (push["attempts"], list(push["deliveries"].values())) == (2, ["failed"])
    assert push_service.attempts[phone.subscription.endpoint] >= 3  # a send or more a round
    assert push_service.deliveries == []
    [given_up] = [r for r in caplog.records if "given up" in r.getMessage()]
    assert given_up.levelno == logging.WARNING
    assert "after 3 attempt(s)" in given_up.getMessage()


async def test_an_fcm_device_gets_the_alert_with_the_chats_collapse_key(
    store: SqlChatStore, nursery: trio.Nursery, tmp_path: Path
) -> None:
    fcm = await start_fcm_server(nursery, project_id="sandstream-test")
    account = tmp_path / "service-account.json"
    account.write_text(fcm.service_account_json())
    settings = PushSettings(fcm_service_account_file=account, fcm_api_url=fcm.url, delay=0.0)
    token = "fcm-registration-token:APA91b" + "y" * 100
    await store.add_push_subscription(
        PushSubscription(
            id="dev_fcm", workspace_id=WORKSPACE, kind="fcm", address=token, created_at=now_ms()
        )
    )
    await turn_ended(store, 1)
    [chat] = await store.list_chats(WORKSPACE, limit=1, now=now_ms())
    async with PushSenders.open(settings) as opened:
        assert await outbox(store, settings, opened, "a").send_due() == 1
    [message] = fcm.deliveries
    assert message["token"] == token
    assert message["notification"] == {"title": "Done", "body": "task 0"}
    assert message["android"]["collapse_key"] == f"chat-{chat.id}"
    assert message["apns"]["headers"]["apns-collapse-id"] == f"chat-{chat.id}"
    assert message["data"]["chatId"] == chat.id
    assert message["data"]["subscriptionId"] == "dev_fcm"
