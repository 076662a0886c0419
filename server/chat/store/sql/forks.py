"""Forks in the chat store: a new chat from one assistant message of another, so two
lines of work go on from one point.

In one transaction (a fork is whole or absent) the fork gets: a ``chats`` row (the
source's workspace and workflow, its title with `` (fork)``); copies of the source's
messages up to and including that one, under new ids, their content kept; copies of
the bag files those messages attach (new ids, the same blobs; the messages' attachments
name the copies); and a copy of the workspace snapshot that message's turn saved, else
of the newest saved before it (:func:`~.snapshots.copy_snapshot`), the same manifest.
Nothing of the fork refers to a row of the source, so deleting either leaves the other
whole. The source may be busy: a fork reads only settled messages.

Bad input: an unknown or deleted chat, or another workspace's, raises
:class:`~sandstream.server.chat.model.ChatNotFoundError`; a message that is not one of
the chat's, or a user message,
:class:`~sandstream.server.chat.model.ForkPointError`; the answer of the chat's running
turn, :class:`~sandstream.server.chat.model.ForkPointRunningError`: nothing written.
Cancellation: a call that started runs to completion in its worker thread
(:mod:`..database`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from sandstream.core import PersistedMessage
from sandstream.server.chat.model import Chat, ForkPointError, ForkPointRunningError, new_id

from ..database import Connection, Database
from .bag_files import insert_files, live_chat_files
from .chats import append_message, chat_of, fork_title, load_chat
from .snapshots import copy_snapshot

__all__ = ["Forks"]

_message_decoder: Final = msgspec.json.Decoder(PersistedMessage)


def _fork_point(conn: Connection, chat_id: str, message_id: str) -> int:
    """The ``seq`` of the settled assistant message ``message_id`` of the chat. Raises
    :class:`ForkPointRunningError` or :class:`ForkPointError`."""
    running = conn.execute(
        "SELECT 1 FROM chat_turns WHERE chat_id = ? AND assistant_message_id = ? "
        "AND state != 'settled'",
        (chat_id, message_id),
    ).fetchone()
    if running is not None:
        raise ForkPointRunningError(chat_id, message_id)
    row = conn.execute(
        "SELECT seq, role FROM messages WHERE chat_id = ? AND id = ?", (chat_id, message_id)
    ).fetchone()
    if row is None:
        raise ForkPointError(chat_id, message_id, "is not a message of this chat")
    if row["role"] != "assistant":
        raise ForkPointError(chat_id, message_id, "is a user message")
    seq: int = row["seq"]
    return seq


def _copy_files(
    conn: Connection,
    chat_id: str,
    messages: Sequence[PersistedMessage],
    *,
    to_chat: str,
    message_ids: Mapping[str, str],
) -> dict[str, str]:
    """Copy to ``to_chat`` the chat's files ``messages`` attach; their ids to the copies'.
    A copy belongs to no run of the fork (no ``session_id``)."""
    attached = {a.id for message in messages for a in message.file_attachments}
    originals = [file for file in live_chat_files(conn, chat_id) if file.id in attached]
    file_ids = {file.id: new_id("file") for file in originals}
    insert_files(
        conn,
        [
            msgspec.structs.replace(
                file,
                id=file_ids[file.id],
                chat_id=to_chat,
                session_id=None,
                message_id=None if file.message_id is None else message_ids.get(file.message_id),
            )
            for file in originals
        ],
    )
    return file_ids


def _copy(
    message: PersistedMessage, message_ids: Mapping[str, str], file_ids: Mapping[str, str]
) -> PersistedMessage:
    """``message`` under its new id, its attachments naming the fork's copies."""
    return msgspec.structs.replace(
        message,
        id=message_ids[message.id],
        file_attachments=[
            msgspec.structs.replace(a, id=file_ids.get(a.id, a.id))
            for a in message.file_attachments
        ],
    )


def _fork(conn: Connection, source: Any, message_id: str, now: int) -> Chat:
    """:meth:`Forks.fork_chat`'s transaction, from the source chat's row ``source``."""
    chat_id: str = source["id"]
    seq = _fork_point(conn, chat_id, message_id)
    rows = conn.execute(
        "SELECT body FROM messages WHERE chat_id = ? AND seq <= ? ORDER BY seq", (chat_id, seq)
    ).fetchall()
    messages = [_message_decoder.decode(row[0]) for row in rows]
    message_ids = {message.id: new_id("msg") for message in messages}
    fork_id = new_id("chat")
    conn.execute(
        "INSERT INTO chats (id, workspace_id, workflow_id, title, conversation_id, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            fork_id,
            source["workspace_id"],
            source["workflow_id"],
            fork_title(source["title"]),
            message_ids.get(source["conversation_id"]),
            now,
            now,
        ),
    )
    file_ids = _copy_files(conn, chat_id, messages, to_chat=fork_id, message_ids=message_ids)
    for message in messages:
        append_message(conn, fork_id, _copy(message, message_ids, file_ids))
    copy_snapshot(conn, chat_id, seq, to_chat=fork_id, message_ids=message_ids)
    return chat_of(load_chat(conn, source["workspace_id"], fork_id))


class Forks:
    """The :class:`~..contract.ChatStore` method that forks a chat."""

    db: Database

    async def fork_chat(
        self, workspace_id: str, chat_id: str, message_id: str, *, now: int
    ) -> Chat:
        def run(conn: Connection) -> Chat:
            return _fork(conn, load_chat(conn, workspace_id, chat_id), message_id, now)

        return await self.db.write(run)
