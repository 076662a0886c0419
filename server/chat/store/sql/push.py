"""Push notifications in the chat store: the devices' subscriptions
(``push_subscriptions``), the pushes waiting out their delay (``pending_pushes``) and
what each push delivered (``push_deliveries``).

A turn that settles records its alert in the settling transaction
(:func:`record_turn_push`, only for a workspace with subscriptions). A device that saw
the turn end marks it seen (:meth:`PushNotifications.mark_push_seen`, an ack); a replica
claims what is due (:meth:`~PushNotifications.claim_due_pushes`: a claim with a lease
and a generation, as the log mover's), records each delivery and ends the push under
that generation, so a push is sent once whichever replica, before or after a restart,
holds it. Bad input: an unknown subscription or push is ``False`` / ``None``; a write
under a lost claim raises :class:`~...errors.FencedError` (nothing written).
Cancellation: a call that started runs to completion in its worker thread.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ...errors import FencedError
from ...ids import new_id
from ...records import PendingPush, PushSubscription
from ..database import Connection, Database

__all__ = ["OUTCOME_TITLES", "PushNotifications", "collapse_key", "record_turn_push"]

OUTCOME_TITLES: Final = {
    "complete": "Done",
    "failed": "Failed",
    "interrupted": "Interrupted",
    "cancelled": "Cancelled",
}
"""A settled turn's alert title, by the assistant message's status."""

_SUBSCRIPTION_COLUMNS: Final = "id, workspace_id, kind, address, p256dh, auth, created_at"
_PUSH_COLUMNS: Final = (
    "id, workspace_id, chat_id, kind, collapse_key, title, body, except_subscription, "
    "created_at, seen_at, generation"
)


def collapse_key(chat_id: str) -> str:
    """The collapse key of a chat's pushes: a newer one replaces an older one."""
    return f"chat-{chat_id}"


def _row(row: Any) -> dict[str, Any]:
    return dict(zip(row.keys(), row, strict=True))


def record_turn_push(conn: Connection, chat_id: str, status: str | None, now: int) -> None:
    """In the settling transaction: the alert of the chat's turn that ended with
    ``status``, if its workspace has a push subscription (else nothing)."""
    conn.execute(
        "INSERT INTO pending_pushes (id, workspace_id, chat_id, kind, collapse_key, title, "
        "body, created_at, state) "
        "SELECT ?, c.workspace_id, c.id, 'alert', ?, ?, COALESCE(c.title, ''), ?, 'pending' "
        "FROM chats AS c WHERE c.id = ? AND EXISTS "
        "(SELECT 1 FROM push_subscriptions AS s WHERE s.workspace_id = c.workspace_id)",
        (
            new_id("push"),
            collapse_key(chat_id),
            OUTCOME_TITLES.get(status or "", "Finished"),
            now,
            chat_id,
        ),
    )


def _check_claim(conn: Connection, push_id: str, generation: int) -> None:
    row = conn.execute("SELECT generation FROM pending_pushes WHERE id = ?", (push_id,)).fetchone()
    fence = 0 if row is None else int(row[0])
    if fence != generation:
        raise FencedError(push_id, generation, fence)


class PushNotifications:
    """The :class:`~..contract.ChatStore` methods on push notifications."""

    db: Database

    async def add_push_subscription(self, subscription: PushSubscription) -> PushSubscription:
        def run(conn: Connection) -> PushSubscription:
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
                f"SELECT {_PUSH_COLUMNS} FROM pending_pushes "
                "WHERE id = ? AND workspace_id = ? AND kind = 'alert'",
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
                conn.execute(
                    "INSERT INTO pending_pushes (id, workspace_id, chat_id, kind, collapse_key, "
                    "title, body, except_subscription, created_at, state) "
                    "SELECT ?, workspace_id, chat_id, 'dismiss', collapse_key, '', '', ?, ?, "
                    "'pending' FROM pending_pushes WHERE id = ? AND state = 'sent' "
                    "ON CONFLICT (id) DO NOTHING",
                    (f"{push_id}.dismiss", subscription_id, now, push_id),
                )
            return True

        return await self.db.write(run)

    async def claim_due_pushes(
        self, owner: str, *, now: int, delay_ms: int, lease_ms: int, limit: int = 32
    ) -> list[PendingPush]:
        def run(conn: Connection) -> list[PendingPush]:
            rows = conn.execute(
                f"SELECT {_PUSH_COLUMNS} FROM pending_pushes WHERE state = 'pending' "
                "AND (kind = 'dismiss' OR created_at <= ?) AND claim_expires_at <= ? "
                "ORDER BY created_at, id LIMIT ?",
                (now - delay_ms, now, limit),
            ).fetchall()
            claimed: list[PendingPush] = []
            for row in rows:
                generation = int(row["generation"]) + 1
                conn.execute(
                    "UPDATE pending_pushes SET claim_owner = ?, generation = ?, "
                    "claim_expires_at = ? WHERE id = ?",
                    (owner, generation, now + lease_ms, row["id"]),
                )
                claimed.append(
                    msgspec.convert({**_row(row), "generation": generation}, PendingPush)
                )
            return claimed

        return await self.db.write(run)

    async def push_targets(self, push: PendingPush) -> list[PushSubscription]:
        def run(conn: Connection) -> list[PushSubscription]:
            rows = conn.execute(
                f"SELECT {_SUBSCRIPTION_COLUMNS} FROM push_subscriptions AS s "
                "WHERE workspace_id = ? AND id != COALESCE(?, '') AND NOT EXISTS "
                "(SELECT 1 FROM push_deliveries AS d WHERE d.push_id = ? "
                "AND d.subscription_id = s.id) ORDER BY created_at, id",
                (push.workspace_id, push.except_subscription, push.id),
            ).fetchall()
            return [PushSubscription(**_row(row)) for row in rows]

        return await self.db.read(run)

    async def record_push_delivery(
        self, push_id: str, subscription_id: str, *, generation: int, now: int
    ) -> None:
        def run(conn: Connection) -> None:
            _check_claim(conn, push_id, generation)
            conn.execute(
                "INSERT INTO push_deliveries (push_id, subscription_id, sent_at) "
                "VALUES (?, ?, ?) ON CONFLICT (push_id, subscription_id) DO NOTHING",
                (push_id, subscription_id, now),
            )

        await self.db.write(run)

    async def end_push(self, push_id: str, *, generation: int, sent: bool, now: int) -> None:
        def run(conn: Connection) -> None:
            _check_claim(conn, push_id, generation)
            conn.execute(
                "UPDATE pending_pushes SET state = ?, done_at = ?, claim_owner = NULL WHERE id = ?",
                ("sent" if sent else "dropped", now, push_id),
            )

        await self.db.write(run)

    async def release_push(self, push_id: str, *, generation: int) -> None:
        def run(conn: Connection) -> None:
            conn.execute(
                "UPDATE pending_pushes SET claim_owner = NULL, claim_expires_at = 0 "
                "WHERE id = ? AND generation = ? AND state = 'pending'",
                (push_id, generation),
            )

        await self.db.write(run)
