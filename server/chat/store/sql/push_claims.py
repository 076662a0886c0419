"""The push outbox's side of the chat store: claiming the due pushes, recording each
device's send before and after it, ending or postponing a push.

A replica claims what is due (:meth:`PushClaims.claim_due_pushes`: a lease and a new
generation, as the log mover's claims) and writes everything else under that
generation. A send to a device is recorded ``sending`` before it is made and
``sent``, ``retry`` or ``failed`` after; a claim that finds a device still
``sending`` (the replica before it died, or was cancelled, between the two) marks it
``unknown`` and never sends it again: a push reaches a device at most once. A push
with devices to try again waits for its next attempt (:meth:`~PushClaims.postpone_push`);
ended, it is ``sent`` if a device had it, else ``dropped``.

Bad input: a write under a lost claim raises :class:`~sandstream.server.chat.model.FencedError`
(nothing written). Cancellation: a call that started runs to completion in its worker
thread.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import msgspec

from sandstream.server.chat.model import DeliveryOutcome, FencedError, PendingPush, PushSubscription

from ..database import Connection, Database

__all__ = ["PushClaims"]

log = logging.getLogger("sandstream.chat.push")

_SUBSCRIPTION_COLUMNS: Final = "id, workspace_id, kind, address, p256dh, auth, created_at"
_PUSH_COLUMNS: Final = (
    "id, workspace_id, chat_id, kind, collapse_key, title, body, except_subscription, "
    "created_at, seen_at, permission_id, attempts, generation"
)


def _row(row: Any) -> dict[str, Any]:
    return dict(zip(row.keys(), row, strict=True))


def _check_claim(conn: Connection, push_id: str, generation: int) -> None:
    row = conn.execute("SELECT generation FROM pending_pushes WHERE id = ?", (push_id,)).fetchone()
    fence = 0 if row is None else int(row[0])
    if fence != generation:
        raise FencedError(push_id, generation, fence)


class PushClaims:
    """The :class:`~..contract.ChatStore` methods of the push outbox."""

    db: Database

    async def claim_due_pushes(
        self, owner: str, *, now: int, delay_ms: int, lease_ms: int, limit: int = 32
    ) -> list[PendingPush]:
        def run(conn: Connection) -> list[PendingPush]:
            rows = conn.execute(
                f"SELECT {_PUSH_COLUMNS} FROM pending_pushes WHERE state = 'pending' "
                "AND (kind = 'dismiss' OR created_at <= ?) AND claim_expires_at <= ? "
                "AND next_attempt_at <= ? ORDER BY created_at, id LIMIT ?",
                (now - delay_ms, now, now, limit),
            ).fetchall()
            claimed: list[PendingPush] = []
            for row in rows:
                generation = int(row["generation"]) + 1
                conn.execute(
                    "UPDATE pending_pushes SET claim_owner = ?, generation = ?, "
                    "claim_expires_at = ? WHERE id = ?",
                    (owner, generation, now + lease_ms, row["id"]),
                )
                in_doubt = conn.execute(
                    "UPDATE push_deliveries SET state = 'unknown' "
                    "WHERE push_id = ? AND state = 'sending'",
                    (row["id"],),
                ).rowcount
                if in_doubt:
                    log.warning(
                        "push %s: %d send(s) were under way when the claim before ended; "
                        "not sent again",
                        row["id"],
                        in_doubt,
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
                "AND d.subscription_id = s.id AND d.state != 'retry') ORDER BY created_at, id",
                (push.workspace_id, push.except_subscription, push.id),
            ).fetchall()
            return [PushSubscription(**_row(row)) for row in rows]

        return await self.db.read(run)

    async def begin_push_delivery(
        self, push_id: str, subscription_id: str, *, generation: int, now: int, lease_ms: int
    ) -> None:
        def run(conn: Connection) -> None:
            _check_claim(conn, push_id, generation)
            conn.execute(
                "INSERT INTO push_deliveries (push_id, subscription_id, sent_at, state) "
                "VALUES (?, ?, ?, 'sending') ON CONFLICT (push_id, subscription_id) "
                "DO UPDATE SET sent_at = excluded.sent_at, state = 'sending'",
                (push_id, subscription_id, now),
            )
            conn.execute(
                "UPDATE pending_pushes SET claim_expires_at = ? WHERE id = ?",
                (now + lease_ms, push_id),
            )

        await self.db.write(run)

    async def finish_push_delivery(
        self, push_id: str, subscription_id: str, outcome: DeliveryOutcome, *, generation: int
    ) -> None:
        def run(conn: Connection) -> None:
            _check_claim(conn, push_id, generation)
            conn.execute(
                "UPDATE push_deliveries SET state = ? WHERE push_id = ? AND subscription_id = ?",
                (outcome, push_id, subscription_id),
            )

        await self.db.write(run)

    async def postpone_push(self, push_id: str, *, generation: int, next_attempt_at: int) -> None:
        def run(conn: Connection) -> None:
            _check_claim(conn, push_id, generation)
            conn.execute(
                "UPDATE pending_pushes SET attempts = attempts + 1, next_attempt_at = ?, "
                "claim_owner = NULL, claim_expires_at = 0 WHERE id = ?",
                (next_attempt_at, push_id),
            )

        await self.db.write(run)

    async def end_push(self, push_id: str, *, generation: int, now: int) -> str:
        def run(conn: Connection) -> str:
            _check_claim(conn, push_id, generation)
            conn.execute(
                "UPDATE push_deliveries SET state = 'failed' WHERE push_id = ? AND state = 'retry'",
                (push_id,),
            )
            delivered = conn.execute(
                "SELECT 1 FROM push_deliveries WHERE push_id = ? AND state IN ('sent', 'unknown')",
                (push_id,),
            ).fetchone()
            state = "sent" if delivered else "dropped"
            conn.execute(
                "UPDATE pending_pushes SET state = ?, done_at = ?, claim_owner = NULL WHERE id = ?",
                (state, now, push_id),
            )
            return state

        return await self.db.write(run)

    async def release_push(self, push_id: str, *, generation: int) -> None:
        def run(conn: Connection) -> None:
            conn.execute(
                "UPDATE pending_pushes SET claim_owner = NULL, claim_expires_at = 0 "
                "WHERE id = ? AND generation = ? AND state = 'pending'",
                (push_id, generation),
            )

        await self.db.write(run)
