"""The chat bag's metadata in the chat store: the ``bag_files`` table.

A bag file is an upload or a file a run wrote back; its bytes are in the blob store
(:mod:`..bag`), its name, size, type, hash, owner and ``deleted_at`` here.
:class:`BagFiles` holds the :class:`~..contract.ChatStore` methods on it; the functions
are steps :mod:`.turns` and :mod:`.forks` share. Bad input:
:class:`~sandstream.server.chat.model.ChatNotFoundError`,
:class:`~sandstream.server.chat.model.RunNotFoundError`,
:class:`~sandstream.server.chat.model.FileNotFoundInBagError`,
:class:`~sandstream.server.chat.model.AttachmentError`. Cancellation: a call that started runs to
completion in its worker thread (:mod:`..database`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sandstream.server.chat.model import (
    AttachmentError,
    BagFile,
    BagSource,
    DispatchRecord,
    FileNotFoundInBagError,
    NewBlob,
    new_id,
)

from ..database import Connection, Database
from .chats import find_message, load_chat
from .dispatch import load_agents_run

__all__ = [
    "BagFiles",
    "claim_results",
    "insert_files",
    "live_chat_files",
    "resolve_attachments",
]


def _bag_file(row: Any) -> BagFile:
    source: BagSource = "result" if row["source"] == "result" else "upload"
    return BagFile(
        id=row["id"],
        workspace_id=row["workspace_id"],
        chat_id=row["chat_id"],
        session_id=row["session_id"],
        message_id=row["message_id"],
        name=row["name"],
        size=row["size"],
        content_type=row["content_type"],
        sha256=row["sha256"],
        source=source,
        created_at=row["created_at"],
    )


def _files(conn: Connection, where: str, args: Sequence[str]) -> list[BagFile]:
    """The files that match ``where`` (SQL of this module's, ``?`` for each of
    ``args``), deleted or not, oldest first."""
    rows = conn.execute(
        f"SELECT * FROM bag_files WHERE {where} ORDER BY created_at, rowid", args
    ).fetchall()
    return [_bag_file(row) for row in rows]


def _live_files(conn: Connection, where: str, args: Sequence[str]) -> list[BagFile]:
    """The files that match ``where`` (see :func:`_files`) and are not deleted."""
    return _files(conn, f"{where} AND deleted_at IS NULL", args)


def _live_file(
    conn: Connection, file_id: str, where: str, args: Sequence[str], owner: str
) -> BagFile:
    """The file ``file_id`` if it matches ``where`` (see :func:`_live_files`). Raises
    :class:`FileNotFoundInBagError` naming ``owner`` otherwise."""
    files = _live_files(conn, f"id = ? AND {where}", (file_id, *args))
    if not files:
        raise FileNotFoundInBagError(file_id, owner)
    return files[0]


def _files_by_id(
    conn: Connection, file_ids: Sequence[str], chat_id: str, workspace_id: str | None
) -> dict[str, BagFile]:
    """Those of ``file_ids`` that are live files of the chat (and of the workspace, if
    given), by id."""
    where = f"id IN ({', '.join('?' for _ in file_ids)}) AND chat_id = ?"
    args = [*file_ids, chat_id]
    if workspace_id is not None:
        where, args = where + " AND workspace_id = ?", [*args, workspace_id]
    return {file.id: file for file in _live_files(conn, where, args)}


def resolve_attachments(
    conn: Connection, workspace_id: str, chat_id: str, file_ids: Sequence[str]
) -> list[BagFile]:
    """The chat's files ``file_ids`` (duplicates once), in that order. Raises
    :class:`AttachmentError` naming those that are not live files of the chat."""
    wanted = list(dict.fromkeys(file_ids))
    if not wanted:
        return []
    found = _files_by_id(conn, wanted, chat_id, workspace_id)
    unknown = [file_id for file_id in wanted if file_id not in found]
    if unknown:
        raise AttachmentError(unknown)
    return [found[file_id] for file_id in wanted]


_RESULTS: Final = "session_id = ? AND source = 'result'"
"""The files the run of a dispatch (``?``) wrote back."""


def _result_files(conn: Connection, session_id: str) -> list[BagFile]:
    return _live_files(conn, _RESULTS, (session_id,))


def claim_results(conn: Connection, session_id: str, message_id: str) -> list[BagFile]:
    """Make the files the run of ``session_id`` wrote back the attachments of message
    ``message_id``; return them, oldest first."""
    files = _result_files(conn, session_id)
    conn.execute(f"UPDATE bag_files SET message_id = ? WHERE {_RESULTS}", (message_id, session_id))
    return files


def insert_files(
    conn: Connection, files: Sequence[BagFile], *, deleted_at: int | None = None
) -> None:
    """Store the metadata of ``files`` (their blobs are in the blob store already)."""
    conn.executemany(
        "INSERT INTO bag_files (id, workspace_id, chat_id, session_id, message_id, name, size, "
        "content_type, sha256, source, created_at, deleted_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                f.id,
                f.workspace_id,
                f.chat_id,
                f.session_id,
                f.message_id,
                f.name,
                f.size,
                f.content_type,
                f.sha256,
                f.source,
                f.created_at,
                deleted_at,
            )
            for f in files
        ],
    )


def live_chat_files(conn: Connection, chat_id: str) -> list[BagFile]:
    """The chat's files that are not deleted, oldest first."""
    return _live_files(conn, "chat_id = ?", (chat_id,))


def _insert_blobs(
    conn: Connection,
    blobs: Sequence[NewBlob],
    *,
    workspace_id: str,
    chat_id: str | None,
    session_id: str | None,
    source: BagSource,
    now: int,
    deleted_at: int | None = None,
) -> list[BagFile]:
    files = [
        BagFile(
            id=new_id("file"),
            workspace_id=workspace_id,
            chat_id=chat_id,
            session_id=session_id,
            name=blob.name,
            size=blob.size,
            content_type=blob.content_type,
            sha256=blob.sha256,
            source=source,
            created_at=now,
        )
        for blob in blobs
    ]
    insert_files(conn, files, deleted_at=deleted_at)
    return files


class BagFiles:
    """The :class:`~..contract.ChatStore` methods on the chat bag's metadata."""

    db: Database

    async def add_uploads(
        self, workspace_id: str, chat_id: str, blobs: list[NewBlob], *, now: int
    ) -> list[BagFile]:
        def run(conn: Connection) -> list[BagFile]:
            load_chat(conn, workspace_id, chat_id)
            return _insert_blobs(
                conn,
                blobs,
                workspace_id=workspace_id,
                chat_id=chat_id,
                session_id=None,
                source="upload",
                now=now,
            )

        return await self.db.write(run)

    async def add_results(
        self, session: DispatchRecord, blobs: list[NewBlob], *, now: int
    ) -> list[BagFile]:
        def run(conn: Connection) -> list[BagFile]:
            recorded = _files(conn, _RESULTS, (session.id,))
            if recorded:
                return recorded
            deleted_at: int | None = None
            if session.chat_id is not None:
                row = conn.execute(
                    "SELECT deleted_at FROM chats WHERE id = ?", (session.chat_id,)
                ).fetchone()
                deleted_at = None if row is None else row["deleted_at"]
            return _insert_blobs(
                conn,
                blobs,
                workspace_id=session.workspace_id,
                chat_id=session.chat_id,
                session_id=session.id,
                source="result",
                now=now,
                deleted_at=deleted_at,
            )

        return await self.db.write(run)

    async def list_files(self, workspace_id: str, chat_id: str) -> list[BagFile]:
        def run(conn: Connection) -> list[BagFile]:
            load_chat(conn, workspace_id, chat_id)
            return _live_files(conn, "chat_id = ? AND workspace_id = ?", (chat_id, workspace_id))

        return await self.db.read(run)

    async def get_file(self, workspace_id: str, chat_id: str, file_id: str) -> BagFile:
        def run(conn: Connection) -> BagFile:
            load_chat(conn, workspace_id, chat_id)
            where = "chat_id = ? AND workspace_id = ?"
            return _live_file(conn, file_id, where, (chat_id, workspace_id), "this chat")

        return await self.db.read(run)

    async def turn_result_files(self, turn_id: str) -> list[BagFile]:
        return await self.db.read(lambda conn: _result_files(conn, turn_id))

    async def list_run_files(self, workspace_id: str, session_id: str) -> list[BagFile]:
        def run(conn: Connection) -> list[BagFile]:
            load_agents_run(conn, workspace_id, session_id)
            return _result_files(conn, session_id)

        return await self.db.read(run)

    async def get_run_file(self, workspace_id: str, session_id: str, file_id: str) -> BagFile:
        def run(conn: Connection) -> BagFile:
            load_agents_run(conn, workspace_id, session_id)
            return _live_file(conn, file_id, _RESULTS, (session_id,), "this run")

        return await self.db.read(run)

    async def turn_attachments(self, session: DispatchRecord) -> list[BagFile]:
        def run(conn: Connection) -> list[BagFile]:
            if session.chat_id is None or session.user_message_id is None:
                return []
            message = find_message(conn, session.chat_id, session.user_message_id)
            wanted = [] if message is None else [a.id for a in message.file_attachments]
            if not wanted:
                return []
            found = _files_by_id(conn, wanted, session.chat_id, None)
            return [found[file_id] for file_id in wanted if file_id in found]

        return await self.db.read(run)
