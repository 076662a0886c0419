"""The push outbox: the task that sends the pushes the store holds, once each.

:class:`PushOutbox` runs in the chat service's nursery on every replica. Every
``poll_interval`` it claims the due pushes (an alert ``delay`` seconds after its event,
a dismiss at once) under a lease and a new generation
(:meth:`~..store.contract.ChatStore.claim_due_pushes`); for each, an alert a device has
seen (a viewer had its turn's end, or an ack) is dropped, else it goes to every
subscription of the workspace it has not reached yet, each delivery recorded under the
claim's generation, and the push is ended as sent. A subscription the service says is
gone is removed; a push a service refuses or cannot take (after its retries) is logged,
and the others still go. A replica that lost its claim (it stalled past the lease)
writes nothing more (:class:`~..errors.FencedError`).

Cancellation: the pushes claimed and not ended are released (shielded), so another
replica, or this one after a restart, takes them at once; a delivery in flight when
the process dies may be sent again by the next owner (its record was not written).
"""

from __future__ import annotations

import logging
import math
import sqlite3
from typing import Final

import psycopg
import trio

from ..credentials.stream_tokens import StreamTokens
from ..errors import FencedError, StoreError
from ..ids import now_ms
from ..records import PendingPush, PushSubscription
from ..store.contract import ChatStore
from .errors import PushError, PushSubscriptionGoneError
from .notification import Notification
from .senders import PushSenders
from .settings import PushSettings

__all__ = ["ALERT_TTL", "DISMISS_TTL", "PushOutbox"]

log = logging.getLogger("sandstream.chat.push")

ALERT_TTL: Final = 24 * 3600
"""Seconds a push service keeps an alert for a device that is offline."""
DISMISS_TTL: Final = 3600
"""Seconds a push service keeps a dismiss: after that the alert is old news anyway."""


class PushOutbox:
    """Sends the store's due pushes with ``senders`` (see the module docstring).
    ``owner``: this replica's name in the claims; ``tokens`` mints the ack token each
    alert carries (a stream token of its chat, which the ack route accepts)."""

    def __init__(
        self,
        store: ChatStore,
        settings: PushSettings,
        senders: PushSenders,
        tokens: StreamTokens,
        *,
        owner: str,
    ) -> None:
        self.store = store
        self.settings = settings
        self.senders = senders
        self.tokens = tokens
        self.owner = owner

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and send due pushes every ``poll_interval`` s until cancelled; a failing
        database (SQLite's, PostgreSQL's) is logged and tried again at the next poll."""
        task_status.started()
        while True:
            try:
                await self.send_due()
            except (sqlite3.Error, psycopg.Error, StoreError, OSError) as exc:
                log.warning("push: looking for due pushes failed: %r", exc)
            await trio.sleep(self.settings.poll_interval)

    async def send_due(self) -> int:
        """Claim the due pushes and deliver them; returns how many were claimed."""
        claimed = await self.store.claim_due_pushes(
            self.owner,
            now=now_ms(),
            delay_ms=math.ceil(self.settings.delay * 1000),
            lease_ms=math.ceil(self.settings.claim_lease * 1000),
        )
        pending = list(claimed)
        try:
            while pending:
                await self._deliver(pending[0])
                pending.pop(0)
        finally:
            with trio.CancelScope(shield=True):
                for push in pending:
                    await self.store.release_push(push.id, generation=push.generation)
        return len(claimed)

    async def _deliver(self, push: PendingPush) -> None:
        generation = push.generation
        try:
            if push.kind == "alert" and push.seen_at is not None:
                log.info("push %s: seen on a device, nobody is pushed", push.id)
                await self.store.end_push(push.id, generation=generation, sent=False, now=now_ms())
                return
            for subscription in await self.store.push_targets(push):
                if not self.senders.accepts(subscription.kind):
                    continue
                if await self._send(push, subscription):
                    await self.store.record_push_delivery(
                        push.id, subscription.id, generation=generation, now=now_ms()
                    )
            await self.store.end_push(push.id, generation=generation, sent=True, now=now_ms())
        except FencedError as exc:
            log.warning("push %s: the claim was lost (%s); its new owner sends it", push.id, exc)

    async def _send(self, push: PendingPush, subscription: PushSubscription) -> bool:
        """Deliver ``push`` to one subscription; False if it did not take it."""
        try:
            await self.senders.send(subscription, self.notification(push, subscription))
        except PushSubscriptionGoneError as exc:
            log.info("push: subscription %s is gone (%s); removed", subscription.id, exc)
            await self.store.remove_gone_subscription(subscription.id)
            return False
        except PushError as exc:
            log.warning("push %s to %s failed: %s", push.id, subscription.id, exc)
            return False
        return True

    def notification(self, push: PendingPush, subscription: PushSubscription) -> Notification:
        """What ``push`` says to ``subscription``'s device: an alert with the data its
        app acks with, or a silent dismiss of the same collapse key."""
        data = {
            "kind": push.kind,
            "pushId": push.id.removesuffix(".dismiss"),
            "chatId": push.chat_id,
            "workspaceId": push.workspace_id,
            "subscriptionId": subscription.id,
        }
        if push.kind == "dismiss":
            return Notification(
                silent=True, collapse_key=push.collapse_key, data=data, ttl=DISMISS_TTL
            )
        token = self.tokens.mint(push.workspace_id, push.chat_id, now_ms() + ALERT_TTL * 1000)
        return Notification(
            title=push.title,
            body=push.body,
            collapse_key=push.collapse_key,
            thread_id=push.chat_id,
            data={**data, "ackToken": token},
            ttl=ALERT_TTL,
        )
