"""Sends run at once, bounded per workspace: a workspace whose push service holds every
request (more devices than its bound) never holds up another workspace's alert, which
arrives while the slow ones are still held; each device still gets its push once. On a
real chat store (SQLite and PostgreSQL) with the outbox's own loop, the loopback push
service as the operator's allow-listed push service. Event-driven: the slow endpoints
answer only once the other workspace's device has its push."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from sandstream.server.chat.credentials.stream_tokens import StreamTokens
from sandstream.server.chat.push.outbox import PushOutbox
from sandstream.server.chat.push.senders import PushSenders
from sandstream.server.chat.store.sql import SqlChatStore
from tests.chat.databases import open_store
from tests.chat.push.pushing import push_settings, register, turn_ended
from tests.support.push_services import LoopbackPushService

pytestmark = pytest.mark.usefixtures("chat_database")

DEADLINE = 60


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlChatStore]:
    opened = await open_store(tmp_path)
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_slow_workspace_never_holds_up_another_workspaces_alert(
    store: SqlChatStore, push_service: LoopbackPushService, tmp_path: Path
) -> None:
    settings = push_settings(
        tmp_path,
        push_service,
        claim_lease=600.0,  # a held send would wait minutes before its retries give up
        workspace_sends=2,
    )
    released = trio.Event()
    async with PushSenders.open(settings) as senders:
        slow = [await register(store, push_service, senders, "ws_slow") for _ in range(6)]
        fast = await register(store, push_service, senders, "ws_fast")
        held = [push_service.hold(browser, until=released) for browser in slow]
        outbox = PushOutbox(store, settings, senders, StreamTokens("token"), owner="a")
        async with trio.open_nursery() as nursery:
            await nursery.start(outbox.run)
            await turn_ended(store, workspace="ws_slow")
            with trio.fail_after(DEADLINE):
                while sum(event.is_set() for event in held) < settings.workspace_sends:
                    await trio.sleep(0.01)
                # the slow workspace's sends fill its bound and wait; now the other's alert
                await turn_ended(store, workspace="ws_fast")
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
