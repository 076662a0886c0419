"""Chats' permission grants in the chat store: the ``permission_grants`` table.

A grant is an ``always`` the chat keeps: one for each permission request of a turn
the user answered ``always`` (:func:`record_grants`; one answered by a grant already, or
about no titled tool call, records none), once per chat, tool kind and title. The log
mover records them as it folds the answers (:meth:`Grants.record_turn_grants`, fenced
by its lease), so a turn that is lost keeps them, and the settle transaction of a turn
(:mod:`.turns`) records those of its message again (a no-op for one recorded). The
chat's later turns get them in ``/config``; revoking one deletes it, deleting the chat
deletes them all (:mod:`.chats`). :class:`Grants` holds the
:class:`~..contract.ChatStore` methods on them.

Bad input: :class:`~sandstream.server.chat.model.ChatNotFoundError` for a chat of
another workspace or a deleted one, :class:`~sandstream.server.chat.model.GrantNotFoundError`
for a grant the chat does not hold, :class:`~sandstream.server.chat.model.FencedError`
for a mover whose lease a newer one took (nothing written). Cancellation: a call that
started runs to completion in its worker thread (:mod:`..database`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sandstream.core import PermissionBlock
from sandstream.server.chat.model import GrantNotFoundError, PermissionGrantRecord, new_id

from ..database import Connection, Database
from ..moved_runs import check_fence
from .chats import load_chat

__all__ = ["Grants", "record_grants"]


def record_grants(
    conn: Connection,
    chat_id: str,
    message_id: str,
    blocks: Iterable[object],
    now: int,
) -> None:
    """Record the grants the ``always`` answers among ``blocks`` (of the turn whose
    assistant message is ``message_id``) give the chat; one the chat holds already
    stays as it is."""
    for block in blocks:
        if (
            isinstance(block, PermissionBlock)
            and block.reply == "always"
            and block.by is None
            and block.tool_kind is not None
            and block.title is not None
        ):
            conn.execute(
                "INSERT INTO permission_grants (id, chat_id, kind, title, message_id, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (chat_id, kind, title) DO NOTHING",
                (new_id("grant"), chat_id, block.tool_kind, block.title, message_id, now),
            )


def _grant(row: Any) -> PermissionGrantRecord:
    return PermissionGrantRecord(
        id=row["id"],
        kind=row["kind"],
        title=row["title"],
        created_at=row["created_at"],
        message_id=row["message_id"],
    )


class Grants:
    """The :class:`~..contract.ChatStore` methods on chats' permission grants."""

    db: Database

    async def list_grants(self, workspace_id: str, chat_id: str) -> list[PermissionGrantRecord]:
        def run(conn: Connection) -> list[PermissionGrantRecord]:
            load_chat(conn, workspace_id, chat_id)
            rows = conn.execute(
                "SELECT id, kind, title, created_at, message_id FROM permission_grants "
                "WHERE chat_id = ? ORDER BY created_at, id",
                (chat_id,),
            ).fetchall()
            return [_grant(row) for row in rows]

        return await self.db.read(run)

    async def record_turn_grants(
        self,
        session_id: str,
        *,
        generation: int,
        answered: Sequence[PermissionBlock],
        now: int,
    ) -> None:
        def run(conn: Connection) -> None:
            turn = conn.execute(
                "SELECT chat_id, assistant_message_id FROM chat_turns "
                "WHERE session_id = ? AND state = 'running'",
                (session_id,),
            ).fetchone()
            if turn is None:
                return  # settled meanwhile: its settle recorded them
            check_fence(conn, session_id, generation)
            record_grants(conn, turn["chat_id"], turn["assistant_message_id"], answered, now)

        await self.db.write(run)

    async def revoke_grant(self, workspace_id: str, chat_id: str, grant_id: str) -> None:
        def run(conn: Connection) -> None:
            load_chat(conn, workspace_id, chat_id)
            cursor = conn.execute(
                "DELETE FROM permission_grants WHERE id = ? AND chat_id = ?", (grant_id, chat_id)
            )
            if cursor.rowcount == 0:
                raise GrantNotFoundError(grant_id)

        await self.db.write(run)
