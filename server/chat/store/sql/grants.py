"""Chats' permission grants in the chat store: the ``permission_grants`` table.

A grant is an ``always`` the chat keeps: the settle transaction of a turn
(:mod:`.turns`) records one for each permission request of its message the user
answered ``always`` (:func:`record_grants`; one answered by a grant already, or about
no titled tool call, records none), once per chat, tool kind and title. The chat's
later turns get them in ``/config``; revoking one deletes it, deleting the chat
deletes them all (:mod:`.chats`). :class:`Grants` holds the
:class:`~..contract.ChatStore` methods on them.

Bad input: :class:`~sandstream.server.chat.model.ChatNotFoundError` for a chat of
another workspace or a deleted one, :class:`~sandstream.server.chat.model.GrantNotFoundError`
for a grant the chat does not hold. Cancellation: a call that started runs to
completion in its worker thread (:mod:`..database`).
"""

from __future__ import annotations

from typing import Any

from sandstream.core import PermissionBlock, PersistedMessage
from sandstream.server.chat.model import GrantNotFoundError, PermissionGrantRecord, new_id

from ..database import Connection, Database
from .chats import load_chat

__all__ = ["Grants", "record_grants"]


def record_grants(conn: Connection, chat_id: str, message: PersistedMessage, now: int) -> None:
    """Record the grants the ``always`` answers of ``message`` (the turn's assistant
    message) give the chat; one the chat holds already stays as it is."""
    for block in message.content:
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
                (new_id("grant"), chat_id, block.tool_kind, block.title, message.id, now),
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

    async def revoke_grant(self, workspace_id: str, chat_id: str, grant_id: str) -> None:
        def run(conn: Connection) -> None:
            load_chat(conn, workspace_id, chat_id)
            cursor = conn.execute(
                "DELETE FROM permission_grants WHERE id = ? AND chat_id = ?", (grant_id, chat_id)
            )
            if cursor.rowcount == 0:
                raise GrantNotFoundError(grant_id)

        await self.db.write(run)
