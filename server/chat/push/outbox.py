"""The push outbox: the task that sends the pushes the store holds, at most once to
each device.

:class:`PushOutbox` runs in the chat service's nursery on every replica. Every
``poll_interval`` it claims the due pushes (an alert ``delay`` seconds after its event,
a dismiss at once, a push tried before when its next attempt is due) under a lease and
a new generation (:meth:`~..store.contract.PushOutboxStore.claim_due_pushes`); for each, an
alert a device has seen (a viewer had its event, or an ack) is ended unsent, else it
goes to every subscription of the workspace not tried yet or to try again: each send
is recorded before it is made (renewing the claim) and after, under the claim's
generation. A subscription the service says is gone is removed; a push a service
refuses is logged; one whose answer was lost after the service may have taken it is
logged and not sent again; one a service could not take after the send's retries is
tried again later (``settings.later``, never sooner than its ``Retry-After``) and given up,
logged, past the policy's attempts or age. The others still go. A replica that lost
its claim (it stalled past the lease) writes nothing more
(:class:`~sandstream.server.chat.model.FencedError`), and a send it made is not made again.

Pushes are sent at once, each in a task of its own (at most ``max_in_flight`` a
replica), and a push's devices at once, at most ``workspace_sends`` sends to one
workspace under way (started in the order of its devices): a slow push service holds up
its own workspace's sends, never another workspace's, and each send is bounded in time
(a Web Push name lookup, then the retries, each within a third of the claim lease).

Cancellation: the pushes claimed and not ended are released (shielded), so another
replica, or this one after a restart, takes them at once; a send under way then (or
when the process dies) is never made again: the device may have had it.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

import psycopg
import trio

from sandstream.server.chat.credentials import StreamTokens
from sandstream.server.chat.model import (
    DeliveryOutcome,
    FencedError,
    PendingPush,
    PushSubscription,
    StoreError,
    now_ms,
)
from sandstream.server.chat.store import PushOutboxStore

from .errors import (
    PushError,
    PushInDoubtError,
    PushSubscriptionGoneError,
    PushUnavailableError,
)
from .notification import Notification
from .senders import PushSenders
from .settings import PushSettings

__all__ = ["ALERT_TTL", "DISMISS_TTL", "PushOutbox"]

log = logging.getLogger("sandstream.chat.push")

_DATABASE_ERRORS = (sqlite3.Error, psycopg.Error, StoreError, OSError)
"""What a failing database raises: logged, and tried again at a later poll."""

ALERT_TTL: Final = 24 * 3600
"""Seconds a push service keeps an alert for a device that is offline."""
DISMISS_TTL: Final = 3600
"""Seconds a push service keeps a dismiss: after that the alert is old news anyway."""


@dataclass
class _WorkspaceSlots:
    """A workspace's send limiter, and how many of its pushes are under way."""

    limiter: trio.CapacityLimiter
    users: int = 0


class PushOutbox:
    """Sends the store's due pushes with ``senders`` (see the module docstring).
    ``owner``: this replica's name in the claims; ``tokens`` mints the ack token each
    alert carries (a stream token of its chat, which the ack route accepts)."""

    def __init__(
        self,
        store: PushOutboxStore,
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
        self._in_flight = 0
        self._slots: dict[str, _WorkspaceSlots] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every ``poll_interval`` s until cancelled, claim the due pushes (as many as
        ``max_in_flight`` leaves room for) and send each in a task of its own, so that a
        push still sending never holds up the next poll; a failing database (SQLite's,
        PostgreSQL's) is logged and tried again at the next poll."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                room = self.settings.max_in_flight - self._in_flight
                if room > 0:
                    try:
                        for push in await self._claim(room):
                            self._in_flight += 1
                            nursery.start_soon(self._deliver_claimed, push)
                    except _DATABASE_ERRORS as exc:
                        log.warning("push: looking for due pushes failed: %r", exc)
                await trio.sleep(self.settings.poll_interval)

    async def send_due(self) -> int:
        """Claim the due pushes and deliver them, all at once; returns how many were
        claimed."""
        claimed = await self._claim(self.settings.max_in_flight)
        async with trio.open_nursery() as nursery:
            for push in claimed:
                self._in_flight += 1
                nursery.start_soon(self._deliver_claimed, push)
        return len(claimed)

    async def _claim(self, limit: int) -> list[PendingPush]:
        return await self.store.claim_due_pushes(
            self.owner,
            now=now_ms(),
            delay_ms=math.ceil(self.settings.delay * 1000),
            lease_ms=math.ceil(self.settings.claim_lease * 1000),
            limit=limit,
        )

    async def _deliver_claimed(self, push: PendingPush) -> None:
        """:meth:`_deliver` ``push``; released (shielded) if it did not end, a failing
        database logged."""
        ended = False
        try:
            await self._deliver(push)
            ended = True
        except _DATABASE_ERRORS as exc:
            log.warning("push %s: the database failed while sending it: %r", push.id, exc)
        finally:
            self._in_flight -= 1
            if not ended:
                with trio.CancelScope(shield=True):
                    try:
                        await self.store.release_push(push.id, generation=push.generation)
                    except _DATABASE_ERRORS as exc:
                        log.warning("push %s: releasing it failed: %r", push.id, exc)

    @asynccontextmanager
    async def _workspace_slots(self, workspace_id: str) -> AsyncIterator[trio.CapacityLimiter]:
        """The limiter of ``workspace_id``'s sends, shared by its pushes under way."""
        entry = self._slots.get(workspace_id)
        if entry is None:
            limiter = trio.CapacityLimiter(self.settings.workspace_sends)
            entry = self._slots[workspace_id] = _WorkspaceSlots(limiter)
        entry.users += 1
        try:
            yield entry.limiter
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._slots[workspace_id]

    async def _deliver(self, push: PendingPush) -> None:
        generation = push.generation
        try:
            if push.kind == "alert" and push.seen_at is not None:
                log.info("push %s: seen on a device, nobody is pushed", push.id)
                await self.store.end_push(push.id, generation=generation, now=now_ms())
                return
            later: list[PushUnavailableError] = []
            failures: list[Exception] = []
            async with (
                self._workspace_slots(push.workspace_id) as slots,
                trio.open_nursery() as sends,
            ):
                for subscription in await self.store.push_targets(push):
                    if failures:
                        break
                    if not self.senders.accepts(subscription.kind):
                        continue
                    slot = object()
                    await slots.acquire_on_behalf_of(slot)
                    sends.start_soon(
                        self._send_recorded, push, subscription, later, failures, slots, slot
                    )
            if failures:
                raise failures[0]
            if later and await self._postpone(push, later):
                return
            await self.store.end_push(push.id, generation=generation, now=now_ms())
        except FencedError as exc:
            log.warning(
                "push %s: the claim was lost (%s); this replica stops sending it", push.id, exc
            )

    async def _send_recorded(
        self,
        push: PendingPush,
        subscription: PushSubscription,
        later: list[PushUnavailableError],
        failures: list[Exception],
        slots: trio.CapacityLimiter,
        slot: object,
    ) -> None:
        """Send ``push`` to one device, recorded before and after under the claim; a
        lost claim or a failing database goes to ``failures`` (and no more sends start)."""
        lease_ms = math.ceil(self.settings.claim_lease * 1000)
        try:
            if failures:
                return
            await self.store.begin_push_delivery(
                push.id,
                subscription.id,
                generation=push.generation,
                now=now_ms(),
                lease_ms=lease_ms,
            )
            outcome = await self._send(push, subscription, later)
            await self.store.finish_push_delivery(
                push.id, subscription.id, outcome, generation=push.generation
            )
        except (FencedError, *_DATABASE_ERRORS) as exc:
            failures.append(exc)
        finally:
            slots.release_on_behalf_of(slot)

    async def _send(
        self, push: PendingPush, subscription: PushSubscription, later: list[PushUnavailableError]
    ) -> DeliveryOutcome:
        """Deliver ``push`` to one subscription; how it ended (a push the service could
        not take now is added to ``later``)."""
        try:
            await self.senders.send(subscription, self.notification(push, subscription))
        except PushSubscriptionGoneError as exc:
            log.info("push: subscription %s is gone (%s); removed", subscription.id, exc)
            await self.store.remove_gone_subscription(subscription.id)
            return "failed"
        except PushUnavailableError as exc:
            log.info("push %s to %s: not taken now: %s", push.id, subscription.id, exc)
            later.append(exc)
            return "retry"
        except PushInDoubtError as exc:
            log.warning("push %s to %s: %s; not sent again", push.id, subscription.id, exc)
            return "unknown"
        except PushError as exc:
            log.warning("push %s to %s failed: %s", push.id, subscription.id, exc)
            return "failed"
        return "sent"

    async def _postpone(self, push: PendingPush, later: list[PushUnavailableError]) -> bool:
        """Leave ``push`` waiting for its next attempt (``settings.later``), the devices
        in ``later`` to try again; False (and a log line) when its attempts or its age
        are used up."""
        policy = self.settings.later
        attempt = push.attempts + 1
        asked = max(exc.retry_after or 0.0 for exc in later)
        wait = max(policy.backoff(attempt), asked)
        due = now_ms() + math.ceil(wait * 1000)
        if attempt >= policy.attempts or due > push.created_at + policy.total * 1000:
            log.warning(
                "push %s: %d device(s) could not take it after %d attempt(s) over %.0f s; given up",
                push.id,
                len(later),
                attempt,
                (now_ms() - push.created_at) / 1000,
            )
            return False
        await self.store.postpone_push(push.id, generation=push.generation, next_attempt_at=due)
        log.info(
            "push %s: %d device(s) could not take it; attempt %d in %.1f s",
            push.id,
            len(later),
            attempt + 1,
            wait,
        )
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
        if push.permission_id is not None:
            data["permissionId"] = push.permission_id
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
