"""Chats and their messages in the chat store: the ``chats`` and ``messages`` tables.

:class:`Chats` holds the :class:`~..contract.ChatStore` methods on them; the
functions are the steps the other modules' transactions share (load a chat, append a
message, its replay, a fork's title). A message is one row, ``(chat_id, seq)`` ordered, its
``PersistedMessage`` as JSON and its replay text beside it (docs/chat.md, "Storage").
A chat's lock columns live on its row; :mod:`.turns` takes, renews and releases the
lock, this module only reads whether it is held. Deleting a chat soft-deletes it and
its bag files and deletes its workspace snapshots (:mod:`.snapshots`) and permission
grants (:mod:`.grants`), in one transaction.

Bad input: an unknown or deleted chat raises
:class:`~sandstream.server.chat.model.ChatNotFoundError`, a chat whose lock is held
:class:`~sandstream.server.chat.model.ChatBusyError`. Cancellation: a call that started runs to
completion in its worker thread (:mod:`..database`).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from sandstream.core import ChatTurn, PersistedMessage, replay_text
from sandstream.server.chat.model import Chat, ChatBusyError, ChatNotFoundError, new_id

from ..database import Connection, Database

__all__ = [
    "DROP_UNUSED_MANIFESTS",
    "TITLE_CHARS",
    "Chats",
    "append_message",
    "busy",
    "chat_of",
    "find_message",
    "fork_title",
    "has_message",
    "load_chat",
    "locked",
    "replay",
    "title",
    "touch_chat",
]

TITLE_CHARS: Final = 80

_message_decoder: Final = msgspec.json.Decoder(PersistedMessage)
_CHAT_COLUMNS: Final = (
    "id, workspace_id, workflow_id, title, conversation_id, created_at, updated_at, "
    "lock_holder, lock_message_id, lock_user_message_id, lock_session_id, lock_expires_at, "
    "(SELECT COUNT(*) FROM messages m WHERE m.chat_id = chats.id) AS message_count"
)


def title(text: str) -> str:
    """A chat's title from its first message: one line, at most :data:`TITLE_CHARS`."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


def fork_title(source: str | None) -> str:
    """The title of a fork of the chat titled ``source``: that title, cut as
    :func:`title` cuts, and `` (fork)``."""
    return f"{title(source)} (fork)" if source else "(fork)"


def locked(row: Any, now: int) -> bool:
    """Whether the chat ``row`` has a lock whose lease runs at ``now``."""
    return row["lock_holder"] is not None and (row["lock_expires_at"] or 0) > now


def busy(row: Any, *, adoptable: bool = False) -> ChatBusyError:
    """The error for a chat ``row`` whose lock is held."""
    return ChatBusyError(
        row["id"],
        row["lock_message_id"],
        row["lock_user_message_id"],
        row["lock_expires_at"],
        adoptable=adoptable,
    )


def chat_of(row: Any) -> Chat:
    """The :class:`Chat` of a row of :data:`_CHAT_COLUMNS`. Its turn is active while
    the lock is held, also past the lock's lease: a lapsed lease only lets another
    replica take the turn over (or a sweep settle it lost); until then the turn is in
    flight, and a viewer must still join it."""
    active = row["lock_holder"] is not None
    return Chat(
        id=row["id"],
        workspace_id=row["workspace_id"],
        workflow_id=row["workflow_id"],
        title=row["title"],
        conversation_id=row["conversation_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        message_count=row["message_count"],
        active_message_id=row["lock_message_id"] if active else None,
        active_user_message_id=row["lock_user_message_id"] if active else None,
        lock_expires_at=row["lock_expires_at"] if active else None,
    )


def load_chat(conn: Connection, workspace_id: str, chat_id: str) -> Any:
    """The chat's row. Raises :class:`ChatNotFoundError` (none, or deleted)."""
    row: Any | None = conn.execute(
        f"SELECT {_CHAT_COLUMNS} FROM chats "
        "WHERE id = ? AND workspace_id = ? AND deleted_at IS NULL",
        (chat_id, workspace_id),
    ).fetchone()
    if row is None:
        raise ChatNotFoundError(chat_id)
    return row


def touch_chat(conn: Connection, chat_id: str, now: int) -> None:
    """Move the chat's ``updated_at`` up to ``now`` (never back)."""
    conn.execute(
        "UPDATE chats SET updated_at = ? WHERE id = ? AND updated_at < ?", (now, chat_id, now)
    )


def append_message(conn: Connection, chat_id: str, message: PersistedMessage) -> None:
    """Append ``message`` after the chat's last one."""
    (seq,) = conn.execute(
        "SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE chat_id = ?", (chat_id,)
    ).fetchone()
    conn.execute(
        "INSERT INTO messages (chat_id, seq, id, role, created_at, body, replay) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            chat_id,
            seq,
            message.id,
            message.role,
            message.created_at,
            msgspec.json.encode(message),
            replay_text(message),
        ),
    )


def find_message(conn: Connection, chat_id: str, message_id: str) -> PersistedMessage | None:
    """The chat's message ``message_id``, if it is stored."""
    row = conn.execute(
        "SELECT body FROM messages WHERE chat_id = ? AND id = ?", (chat_id, message_id)
    ).fetchone()
    return None if row is None else _message_decoder.decode(row[0])


def has_message(conn: Connection, message_id: str) -> bool:
    """Whether a message ``message_id`` is stored (its body is not read)."""
    return conn.execute("SELECT 1 FROM messages WHERE id = ?", (message_id,)).fetchone() is not None


def replay(conn: Connection, chat_id: str, limit: int) -> list[ChatTurn]:
    """The last ``limit`` messages as replay turns, oldest first: their ``replay``
    column only, so a huge message costs nothing here."""
    if limit <= 0:
        return []
    rows = conn.execute(
        "SELECT role, replay, created_at FROM messages WHERE chat_id = ? ORDER BY seq DESC LIMIT ?",
        (chat_id, limit),
    ).fetchall()
    return [ChatTurn(row[0], row[1], row[2]) for row in reversed(rows)]


DROP_UNUSED_MANIFESTS: Final = (
    "DELETE FROM snapshot_manifests WHERE sha256 NOT IN "
    "(SELECT manifest_sha256 FROM chat_snapshots)"
)
"""Deletes the workspace snapshot manifests no snapshot holds any more (once snapshots
are deleted: a chat's, or those past what a chat keeps)."""


class Chats:
    """The :class:`~..contract.ChatStore` methods on chats and messages."""

    db: Database

    async def create_chat(
        self, *, workspace_id: str, workflow_id: str | None, title: str | None, now: int
    ) -> Chat:
        chat_id = new_id("chat")

        def run(conn: Connection) -> Chat:
            conn.execute(
                "INSERT INTO chats (id, workspace_id, workflow_id, title, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (chat_id, workspace_id, workflow_id, title, now, now),
            )
            return chat_of(load_chat(conn, workspace_id, chat_id))

        return await self.db.write(run)

    async def list_chats(self, workspace_id: str, *, limit: int, now: int) -> list[Chat]:
        def run(conn: Connection) -> list[Chat]:
            rows = conn.execute(
                f"SELECT {_CHAT_COLUMNS} FROM chats WHERE workspace_id = ? AND deleted_at IS NULL "
                "ORDER BY updated_at DESC, id LIMIT ?",
                (workspace_id, limit),
            ).fetchall()
            return [chat_of(row) for row in rows]

        return await self.db.read(run)

    async def get_chat(self, workspace_id: str, chat_id: str, *, now: int) -> Chat:
        return await self.db.read(lambda conn: chat_of(load_chat(conn, workspace_id, chat_id)))

    async def get_messages(
        self, workspace_id: str, chat_id: str, *, limit: int | None = None
    ) -> list[PersistedMessage]:
        def run(conn: Connection) -> list[PersistedMessage]:
            load_chat(conn, workspace_id, chat_id)
            if limit is None:
                rows = conn.execute(
                    "SELECT body FROM messages WHERE chat_id = ? ORDER BY seq", (chat_id,)
                ).fetchall()
            else:
                rows = conn.execute(
                    "SELECT body FROM messages WHERE chat_id = ? ORDER BY seq DESC LIMIT ?",
                    (chat_id, limit),
                ).fetchall()
                rows.reverse()
            return [_message_decoder.decode(row[0]) for row in rows]

        return await self.db.read(run)

    async def delete_chat(self, workspace_id: str, chat_id: str, *, now: int) -> None:
        def run(conn: Connection) -> None:
            row = load_chat(conn, workspace_id, chat_id)
            if locked(row, now):
                raise busy(row)
            conn.execute("UPDATE chats SET deleted_at = ? WHERE id = ?", (now, chat_id))
            conn.execute(
                "UPDATE bag_files SET deleted_at = ? WHERE chat_id = ? AND deleted_at IS NULL",
                (now, chat_id),
            )
            conn.execute("DELETE FROM chat_snapshots WHERE chat_id = ?", (chat_id,))
            conn.execute(DROP_UNUSED_MANIFESTS)
            conn.execute("DELETE FROM permission_grants WHERE chat_id = ?", (chat_id,))
            conn.execute("DELETE FROM chat_usage WHERE chat_id = ?", (chat_id,))

        await self.db.write(run)

    async def append_user_message(
        self, workspace_id: str, chat_id: str, message: PersistedMessage, now: int
    ) -> None:
        def run(conn: Connection) -> None:
            load_chat(conn, workspace_id, chat_id)
            append_message(conn, chat_id, message)
            touch_chat(conn, chat_id, now)

        await self.db.write(run)
