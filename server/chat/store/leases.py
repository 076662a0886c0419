"""The chat database's leases: :class:`DatabaseLease`, the log mover's lease when no
Redis is configured (on SQLite or PostgreSQL, whichever holds the chat).

A ``leases`` row per session: owner, fencing generation, expiry (wall-clock Unix ms).
:meth:`~DatabaseLease.acquire` succeeds only when no live lease holds the session and
returns a generation above every one before (a released row keeps its generation);
renew and release act only for that owner and generation.

Bad input: a ttl that is not a finite number of seconds > 0 raises :class:`ValueError`.
Calls raise the database's errors when it fails. Cancellation: a transaction
that started completes (:mod:`.database`); the caller does not learn its
outcome.
"""

from __future__ import annotations

import math

from sandstream.server.chat.model import now_ms

from .database import Connection, Database

__all__ = ["DatabaseLease", "ttl_ms"]


def ttl_ms(ttl: float) -> int:
    """A lease's ``ttl`` (seconds) in whole milliseconds, at least 1. Raises
    :class:`ValueError` unless it is a finite number > 0."""
    if not (ttl > 0 and math.isfinite(ttl)):
        raise ValueError(f"a lease ttl must be a finite number of seconds > 0, got {ttl}")
    return max(1, math.ceil(ttl * 1000))


class DatabaseLease:
    """A lease per session on the chat database's ``leases`` table; see the module
    docstring. Expiry compares wall-clock times: processes sharing the database must
    share a clock (one machine, or synchronised clocks)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def acquire(self, session_id: str, owner: str, ttl: float) -> int | None:
        lease_ms = ttl_ms(ttl)

        def run(conn: Connection) -> int | None:
            now = now_ms()
            row = conn.execute(
                "SELECT owner, generation, expires_at FROM leases WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if row is not None and row["owner"] is not None and row["expires_at"] > now:
                return None
            generation = 1 if row is None else int(row["generation"]) + 1
            conn.execute(
                "INSERT INTO leases (session_id, owner, generation, expires_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
                "owner = excluded.owner, generation = excluded.generation, "
                "expires_at = excluded.expires_at",
                (session_id, owner, generation, now + lease_ms),
            )
            return generation

        return await self.db.write(run)

    async def renew(self, session_id: str, owner: str, generation: int, ttl: float) -> bool:
        lease_ms = ttl_ms(ttl)

        def run(conn: Connection) -> bool:
            now = now_ms()
            cursor = conn.execute(
                "UPDATE leases SET expires_at = ? WHERE session_id = ? AND owner = ? "
                "AND generation = ? AND expires_at > ?",
                (now + lease_ms, session_id, owner, generation, now),
            )
            return cursor.rowcount == 1

        return await self.db.write(run)

    async def release(self, session_id: str, owner: str, generation: int) -> None:
        def run(conn: Connection) -> None:
            conn.execute(
                "UPDATE leases SET owner = NULL, expires_at = 0 "
                "WHERE session_id = ? AND owner = ? AND generation = ?",
                (session_id, owner, generation),
            )

        await self.db.write(run)
