"""What the push tests set up: the settings of a server or senders that push to the
loopback push service (a fresh VAPID key), and, straight in a chat store (no server), a
browser registered in a workspace and chats whose turn ended with their alerts waiting."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from sandstream.server.chat.model.ids import now_ms
from sandstream.server.chat.model.records import PushSubscription
from sandstream.server.chat.push.senders import PushSenders
from sandstream.server.chat.push.settings import PushSettings
from sandstream.server.chat.push.webpush import VapidKey
from sandstream.server.chat.store.sql import SqlChatStore
from sandstream.server.chat.store.sql.push import record_turn_push
from tests.support.push_services import Browser, LoopbackPushService

__all__ = ["WORKSPACE", "push_settings", "register", "turn_ended"]

WORKSPACE = "ws_push"


def push_settings(
    directory: Path, push_service: LoopbackPushService, **changes: Any
) -> PushSettings:
    """Push settings with a new VAPID key (in ``directory``), no delay, a quick poll,
    ``push_service`` allowed; ``changes`` override any of them."""
    key_file = directory / "vapid.pem"
    key_file.write_bytes(VapidKey.generate().private_pem())
    defaults: dict[str, Any] = {
        "delay": 0.0,
        "poll_interval": 0.01,
        "allow_hosts": frozenset({push_service.host}),
    }
    return PushSettings(vapid_key_file=key_file, **(defaults | changes))


async def register(
    store: SqlChatStore,
    push_service: LoopbackPushService,
    senders: PushSenders,
    workspace: str = WORKSPACE,
) -> Browser:
    """A new browser of ``push_service``, registered in ``workspace``."""
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


async def turn_ended(store: SqlChatStore, count: int = 1, workspace: str = WORKSPACE) -> None:
    """``count`` chats of ``workspace`` whose turn ended: their alerts wait in the store."""
    for n in range(count):
        chat = await store.create_chat(
            workspace_id=workspace, workflow_id=None, title=f"task {n}", now=now_ms()
        )
        await store.db.write(
            functools.partial(
                record_turn_push, chat_id=chat.id, turn_id=None, status="complete", now=now_ms()
            )
        )
