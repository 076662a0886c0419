"""Push notifications in the chat store: the devices' subscriptions
(``push_subscriptions``), the events that record an alert (``pending_pushes``), and
what makes an alert moot or seen (``seen_permissions``, acks).

Alerts are recorded in the transaction of their event: a turn that settles
(:func:`record_turn_push`, also a turn the lost-turn sweep settles), and a permission
request the log mover folds (:meth:`PushNotifications.record_permission_news`, under
the mover's fence). Only a workspace with subscriptions gets them. A newer alert of a
chat's collapse key replaces one still waiting; a permission request answered or
resolved, or whose turn ended, drops its waiting alert and dismisses a delivered one.
A viewer that hands out a turn's end or a permission request marks it seen, in the
database, so a replica's outbox drops it (:mod:`.push_claims` sends). Dropping a
waiting push raises its generation, so an outbox sending it writes nothing more.

Bad input: an unknown subscription, push or turn is ``False`` / ``None`` / nothing
written; a write under a lost mover lease raises :class:`~sandstream.server.chat.model.FencedError`
(nothing written). Cancellation: a call that started runs to completion in its worker
thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sandstream.server.chat.model import PushSubscription, PushSubscriptionLimitError, new_id

from ..database import Connection, Database
from ..moved_runs import check_fence

__all__ = [
    "OUTCOME_TITLES",
    "PERMISSION_TITLE",
    "PushNotifications",
    "collapse_key",
    "moot_turn_permissions",
    "permission_collapse_key",
    "record_turn_push",
]

OUTCOME_TITLES: Final = {
    "complete": "Done",
    "failed": "Failed",
    "interrupted": "Interrupted",
    "cancelled": "Cancelled",
}
"""A settled turn's alert title, by the assistant message's status."""
PERMISSION_TITLE: Final = "Waiting for your answer"
"""The alert title of a permission request (its body: the chat's title)."""

_SUBSCRIPTION_COLUMNS: Final = "id, workspace_id, kind, address, p256dh, auth, created_at"
_DELIVERED: Final = "('sending', 'sent', 'unknown')"
"""Delivery states of a device that has (or may have) had the push."""


def collapse_key(chat_id: str) -> str:
    """The collapse key of a chat's turn alerts: a newer one replaces an older one."""
    return f"chat-{chat_id}"


def permission_collapse_key(chat_id: str) -> str:
    """The collapse key of a chat's permission alerts, their own: a newer request
    replaces an older one, and a turn's end does not replace a question."""
    return f"permission-{chat_id}"


def _row(row: Any) -> dict[str, Any]:
    return dict(zip(row.keys(), row, strict=True))


def _is_new(conn: Connection, subscription: PushSubscription) -> bool:
    """Whether ``subscription``'s address is not yet one of its workspace's."""
    return (
        conn.execute(
            "SELECT 1 FROM push_subscriptions WHERE workspace_id = ? AND kind = ? AND address = ?",
            (subscription.workspace_id, subscription.kind, subscription.address),
        ).fetchone()
        is None
    )


def _record_alert(
    conn: Connection,
    chat_id: str,
    key: str,
    title: str,
    now: int,
    *,
    turn_id: str | None,
    permission_id: str | None = None,
    seen_at: int | None = None,
) -> None:
    """An alert of the chat (body: its title) if its workspace has a subscription;
    it replaces the chat's alert of ``key`` still waiting."""
    _drop_waiting(conn, "chat_id = ? AND collapse_key = ?", (chat_id, key), now)
    conn.execute(
        "INSERT INTO pending_pushes (id, workspace_id, chat_id, kind, collapse_key, title, "
        "body, created_at, seen_at, state, turn_id, permission_id) "
        "SELECT ?, c.workspace_id, c.id, 'alert', ?, ?, COALESCE(c.title, ''), ?, ?, "
        "'pending', ?, ? FROM chats AS c WHERE c.id = ? AND EXISTS "
        "(SELECT 1 FROM push_subscriptions AS s WHERE s.workspace_id = c.workspace_id) "
        "ON CONFLICT (turn_id, permission_id) DO NOTHING",
        (new_id("push"), key, title, now, seen_at, turn_id, permission_id, chat_id),
    )


def _drop_waiting(conn: Connection, condition: str, params: tuple[Any, ...], now: int) -> None:
    """Drop the waiting alerts that match ``condition``, fencing off a claim on them."""
    conn.execute(
        "UPDATE pending_pushes SET state = 'dropped', done_at = ?, claim_owner = NULL, "
        f"generation = generation + 1 WHERE kind = 'alert' AND state = 'pending' AND {condition}",
        (now, *params),
    )


def _dismiss_delivered(
    conn: Connection,
    condition: str,
    params: tuple[Any, ...],
    now: int,
    except_subscription: str | None = None,
) -> None:
    """A dismiss of each alert matching ``condition`` that a device has (or may have)
    had, to the workspace's devices but ``except_subscription`` (once per alert)."""
    conn.execute(
        "INSERT INTO pending_pushes (id, workspace_id, chat_id, kind, collapse_key, title, "
        "body, except_subscription, created_at, state) "
        "SELECT p.id || '.dismiss', p.workspace_id, p.chat_id, 'dismiss', p.collapse_key, "
        "'', '', ?, ?, 'pending' FROM pending_pushes AS p "
        f"WHERE p.kind = 'alert' AND {condition} AND EXISTS (SELECT 1 FROM push_deliveries "
        f"AS d WHERE d.push_id = p.id AND d.state IN {_DELIVERED}) "
        "ON CONFLICT (id) DO NOTHING",
        (except_subscription, now, *params),
    )


def _moot_permissions(conn: Connection, condition: str, params: tuple[Any, ...], now: int) -> None:
    """The permission alerts matching ``condition`` are moot: dismissed where a device
    had them, dropped where they wait."""
    condition = f"permission_id IS NOT NULL AND {condition}"
    _dismiss_delivered(conn, condition, params, now)
    _drop_waiting(conn, condition, params, now)


def moot_turn_permissions(conn: Connection, turn_id: str, now: int) -> None:
    """In the transaction that settles the turn ``turn_id``: its permission alerts are
    moot, its seen marks gone."""
    _moot_permissions(conn, "turn_id = ?", (turn_id,), now)
    conn.execute("DELETE FROM seen_permissions WHERE turn_id = ?", (turn_id,))


def record_turn_push(
    conn: Connection, chat_id: str, turn_id: str | None, status: str | None, now: int
) -> None:
    """In the settling transaction: the alert of the chat's turn ``turn_id`` that ended
    with ``status``, if its workspace has a push subscription; its permission alerts
    are moot."""
    if turn_id is not None:
        moot_turn_permissions(conn, turn_id, now)
    title = OUTCOME_TITLES.get(status or "", "Finished")
    _record_alert(conn, chat_id, collapse_key(chat_id), title, now, turn_id=turn_id)


class PushNotifications:
    """The :class:`~..contract.ChatStore` methods on push subscriptions and alerts."""

    db: Database

    async def add_push_subscription(
        self, subscription: PushSubscription, *, limit: int | None = None
    ) -> PushSubscription:
        def run(conn: Connection) -> PushSubscription:
            if limit is not None and _is_new(conn, subscription):
                held = conn.execute(
                    "SELECT COUNT(*) FROM push_subscriptions WHERE workspace_id = ?",
                    (subscription.workspace_id,),
                ).fetchone()[0]
                if held >= limit:
                    raise PushSubscriptionLimitError(subscription.workspace_id, limit)
            conn.execute(
                "INSERT INTO push_subscriptions (id, workspace_id, kind, address, p256dh, auth, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (workspace_id, kind, address) DO UPDATE SET "
                "p256dh = excluded.p256dh, auth = excluded.auth",
                (
                    subscription.id,
                    subscription.workspace_id,
                    subscription.kind,
                    subscription.address,
                    subscription.p256dh,
                    subscription.auth,
                    subscription.created_at,
                ),
            )
            row = conn.execute(
                f"SELECT {_SUBSCRIPTION_COLUMNS} FROM push_subscriptions "
                "WHERE workspace_id = ? AND kind = ? AND address = ?",
                (subscription.workspace_id, subscription.kind, subscription.address),
            ).fetchone()
            return PushSubscription(**_row(row))

        return await self.db.write(run)

    async def list_push_subscriptions(self, workspace_id: str) -> list[PushSubscription]:
        def run(conn: Connection) -> list[PushSubscription]:
            rows = conn.execute(
                f"SELECT {_SUBSCRIPTION_COLUMNS} FROM push_subscriptions "
                "WHERE workspace_id = ? ORDER BY created_at, id",
                (workspace_id,),
            ).fetchall()
            return [PushSubscription(**_row(row)) for row in rows]

        return await self.db.read(run)

    async def delete_push_subscription(self, workspace_id: str, subscription_id: str) -> bool:
        def run(conn: Connection) -> bool:
            cursor = conn.execute(
                "DELETE FROM push_subscriptions WHERE workspace_id = ? AND id = ?",
                (workspace_id, subscription_id),
            )
            return cursor.rowcount == 1

        return await self.db.write(run)

    async def remove_gone_subscription(self, subscription_id: str) -> None:
        def run(conn: Connection) -> None:
            conn.execute("DELETE FROM push_subscriptions WHERE id = ?", (subscription_id,))

        await self.db.write(run)

    async def mark_push_seen(self, chat_id: str, now: int) -> int:
        def run(conn: Connection) -> int:
            cursor = conn.execute(
                "UPDATE pending_pushes SET seen_at = ? WHERE chat_id = ? AND kind = 'alert' "
                "AND state = 'pending' AND seen_at IS NULL",
                (now, chat_id),
            )
            return cursor.rowcount

        return await self.db.write(run)

    async def mark_permissions_seen(
        self, turn_id: str, permission_ids: Sequence[str], now: int
    ) -> None:
        def run(conn: Connection) -> None:
            for permission_id in permission_ids:
                conn.execute(
                    "INSERT INTO seen_permissions (turn_id, permission_id, seen_at) "
                    "SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM chat_turns "
                    "WHERE id = ? AND state != 'settled') "
                    "ON CONFLICT (turn_id, permission_id) DO NOTHING",
                    (turn_id, permission_id, now, turn_id),
                )
                conn.execute(
                    "UPDATE pending_pushes SET seen_at = COALESCE(seen_at, ?) "
                    "WHERE turn_id = ? AND permission_id = ? AND state = 'pending'",
                    (now, turn_id, permission_id),
                )

        await self.db.write(run)

    async def record_permission_news(
        self,
        session_id: str,
        *,
        generation: int,
        asked: str | None,
        resolved: Sequence[str],
        now: int,
    ) -> None:
        def run(conn: Connection) -> None:
            turn = conn.execute(
                "SELECT id, chat_id FROM chat_turns WHERE session_id = ? AND state = 'running'",
                (session_id,),
            ).fetchone()
            if turn is None:
                return
            check_fence(conn, session_id, generation)
            turn_id, chat_id = turn["id"], turn["chat_id"]
            for permission_id in resolved:
                _moot_permissions(
                    conn, "turn_id = ? AND permission_id = ?", (turn_id, permission_id), now
                )
            if (
                asked is None
                or conn.execute(
                    "SELECT 1 FROM pending_pushes WHERE turn_id = ? AND permission_id = ?",
                    (turn_id, asked),
                ).fetchone()
            ):
                return  # no request, or one recorded before (a takeover folds it again)
            seen = conn.execute(
                "SELECT seen_at FROM seen_permissions WHERE turn_id = ? AND permission_id = ?",
                (turn_id, asked),
            ).fetchone()
            _record_alert(
                conn,
                chat_id,
                permission_collapse_key(chat_id),
                PERMISSION_TITLE,
                now,
                turn_id=turn_id,
                permission_id=asked,
                seen_at=None if seen is None else seen[0],
            )

        await self.db.write(run)

    async def permission_answered(self, turn_id: str, permission_id: str, now: int) -> None:
        def run(conn: Connection) -> None:
            _moot_permissions(
                conn, "turn_id = ? AND permission_id = ?", (turn_id, permission_id), now
            )

        await self.db.write(run)

    async def ack_push(
        self,
        workspace_id: str,
        push_id: str,
        *,
        subscription_id: str | None,
        opened: bool,
        now: int,
    ) -> bool:
        def run(conn: Connection) -> bool:
            row = conn.execute(
                "SELECT id FROM pending_pushes WHERE id = ? AND workspace_id = ? "
                "AND kind = 'alert'",
                (push_id, workspace_id),
            ).fetchone()
            if row is None:
                return False
            conn.execute(
                "UPDATE pending_pushes SET seen_at = COALESCE(seen_at, ?) WHERE id = ?",
                (now, push_id),
            )
            if opened:
                conn.execute(
                    "UPDATE pending_pushes SET opened_at = COALESCE(opened_at, ?) WHERE id = ?",
                    (now, push_id),
                )
                _dismiss_delivered(conn, "id = ?", (push_id,), now, subscription_id)
            return True

        return await self.db.write(run)
