"""Sends run at once, bounded per workspace: a workspace whose push service holds every
request (more devices than its bound) never holds up another workspace's alert, which
arrives while the slow ones are still held; each device still gets its push once. On a
real chat store (SQLite and PostgreSQL) with the outbox's own loop, the loopback push
service as the operator's allow-listed push service. Event-driven: the slow endpoints
answer only once the other workspace's device has its push."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from sandstream.server.chat.credentials.stream_tokens import StreamTokens
from sandstream.server.chat.model.ids import now_ms
from sandstream.server.chat.model.records import PushSubscription
from sandstream.server.chat.push.outbox import PushOutbox
from sandstream.server.chat.push.senders import PushSenders
from sandstream.server.chat.push.settings import PushSettings
from sandstream.server.chat.push.webpush import VapidKey
from sandstream.server.chat.store.sql import SqlChatStore
from sandstream.server.chat.store.sql.push import record_turn_push
from tests.chat.databases import open_store
from tests.support.push_services import Browser, LoopbackPushService

pytestmark = pytest.mark.usefixtures("chat_database")

DEADLINE = 60


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlChatStore]:
    opened = await open_store(tmp_path)
    try:
        yield opened
    finally:
        await opened.close()


async def _register(
    store: SqlChatStore, push_service: LoopbackPushService, senders: PushSenders, workspace: str
) -> Browser:
    browser = push_service.subscribe(senders.vapid_public_key)
    subscription = browser.subscription
    await store.add_push_subscription(
        PushSubscription(
            id=f"dev_{subscription.endpoint.rsplit('/', 1)[1]}",
            workspace_id=workspace,
            kind="webpush",
            address=subscription.endpoint,
            p256dh=subscription.p256dh,
            auth=subscription.auth,
            created_at=now_ms(),
        )
    )
    return browser


async def _turn_ended(store: SqlChatStore, workspace: str) -> None:
    chat = await store.create_chat(
        workspace_id=workspace, workflow_id=None, title="task", now=now_ms()
    )
    ended = functools.partial(
        record_turn_push, chat_id=chat.id, turn_id=None, status="complete", now=now_ms()
    )
    await store.db.write(ended)


async def test_a_slow_workspace_never_holds_up_another_workspaces_alert(
    store: SqlChatStore, push_service: LoopbackPushService, tmp_path: Path
) -> None:
    key_file = tmp_path / "vapid.pem"
    key_file.write_bytes(VapidKey.generate().private_pem())
    settings = PushSettings(
        vapid_key_file=key_file,
        delay=0.0,
        poll_interval=0.01,
        claim_lease=600.0,  # a held send would wait minutes before its retries give up
        workspace_sends=2,
        allow_hosts=frozenset({push_service.host}),
    )
    released = trio.Event()
    async with PushSenders.open(settings) as senders:
        slow = [await _register(store, push_service, senders, "ws_slow") for _ in range(6)]
        fast = await _register(store, push_service, senders, "ws_fast")
        held = [push_service.hold(browser, until=released) for browser in slow]
        outbox = PushOutbox(store, settings, senders, StreamTokens("token"), owner="a")
        async with trio.open_nursery() as nursery:
            await nursery.start(outbox.run)
            await _turn_ended(store, "ws_slow")
            with trio.fail_after(DEADLINE):
                while sum(event.is_set() for event in held) < settings.workspace_sends:
                    await trio.sleep(0.01)
                # the slow workspace's sends fill its bound and wait; now the other's alert
                await _turn_ended(store, "ws_fast")
                while not push_service.delivered_to(fast):
                    await trio.sleep(0.01)
            assert not released.is_set()
            in_flight = sum(event.is_set() for event in held)
            assert in_flight == settings.workspace_sends  # the bound held
            released.set()
            with trio.fail_after(DEADLINE):
                while any(not push_service.delivered_to(browser) for browser in slow):
                    await trio.sleep(0.01)
                while await store.db.read(
                    lambda conn: conn.execute(
                        "SELECT 1 FROM pending_pushes WHERE state = 'pending'"
                    ).fetchone()
                ):
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    for browser in [*slow, fast]:
        assert len(push_service.delivered_to(browser)) == 1
        assert push_service.attempts[browser.subscription.endpoint] == 1
