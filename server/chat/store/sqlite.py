"""The embedded store: :class:`SQLiteChatStore`, the :class:`~.store.ChatStore` on SQLite.

One database file (``chat.sqlite3`` in the data dir), WAL mode, every call in a worker
thread (:mod:`sandstream.server.sqlite`). Writes that belong together run in one ``BEGIN
IMMEDIATE`` transaction, so several server processes may share the file: the chat
lock, the message sequence numbers and token consumption stay consistent across them.
Bag file *bytes* live in the blob store (:mod:`.bag`); this module keeps their
metadata only.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from sandstream.core.persistence import (
    ChatTurn,
    ErrorBlock,
    PersistedMessage,
    replay_text,
    user_message,
)
from sandstream.server.sqlite import SQLiteDatabase

from ..errors import (
    AttachmentError,
    ChatBusyError,
    ChatNotFoundError,
    FileNotFoundInBagError,
    RunNotFoundError,
    TokenRejectedError,
)
from ..ids import new_id
from ..records import (
    BagFile,
    BagSource,
    Chat,
    DispatchRecord,
    Environment,
    NewBlob,
    Purpose,
    TokenMint,
    TurnFinish,
    TurnRecord,
    TurnRequest,
    TurnStart,
)
from .migrations import migrate
from .moved_runs import check_fence

__all__ = ["DATABASE_NAME", "TITLE_CHARS", "TURN_LOST", "SQLiteChatStore"]

log = logging.getLogger("sandstream.chat")

DATABASE_NAME: Final = "chat.sqlite3"
PAGE_SIZE: Final = 32 * 1024
"""The page size of a new chat database: the log mover stores a session's chunks as
runs of up to 4 MiB, twice as fast with 32 KiB pages as with SQLite's 4 KiB (an
existing database keeps its own)."""
TITLE_CHARS: Final = 80
TURN_LOST: Final = "turn_lost"
"""Error code of an assistant message written for a turn whose server died."""

_message_decoder: Final = msgspec.json.Decoder(PersistedMessage)
_conversation_decoder: Final = msgspec.json.Decoder(list[ChatTurn])
_vars_decoder: Final = msgspec.json.Decoder(dict[str, str])
_CHAT_COLUMNS: Final = (
    "id, workspace_id, workflow_id, title, conversation_id, created_at, updated_at, "
    "lock_holder, lock_message_id, lock_user_message_id, lock_session_id, lock_expires_at, "
    "(SELECT COUNT(*) FROM messages m WHERE m.chat_id = chats.id) AS message_count"
)


def _title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


def _locked(row: sqlite3.Row, now: int) -> bool:
    return row["lock_holder"] is not None and (row["lock_expires_at"] or 0) > now


def _chat(row: sqlite3.Row, now: int) -> Chat:
    active = _locked(row, now)
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


def _bag_file(row: sqlite3.Row) -> BagFile:
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


def _session(row: sqlite3.Row) -> DispatchRecord:
    return DispatchRecord(
        id=row["id"],
        kind="agents" if row["kind"] == "agents" else "chat",
        workspace_id=row["workspace_id"],
        chat_id=row["chat_id"],
        workflow_id=row["workflow_id"],
        user_message_id=row["user_message_id"],
        assistant_message_id=row["assistant_message_id"],
        prompt=row["prompt"],
        conversation=_conversation_decoder.decode(row["conversation"]),
        created_at=row["created_at"],
        settled_at=row["settled_at"],
    )


def _load_chat(conn: sqlite3.Connection, workspace_id: str, chat_id: str) -> sqlite3.Row:
    row: sqlite3.Row | None = conn.execute(
        f"SELECT {_CHAT_COLUMNS} FROM chats "
        "WHERE id = ? AND workspace_id = ? AND deleted_at IS NULL",
        (chat_id, workspace_id),
    ).fetchone()
    if row is None:
        raise ChatNotFoundError(chat_id)
    return row


def _next_seq(conn: sqlite3.Connection, chat_id: str) -> int:
    row = conn.execute(
        "SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE chat_id = ?", (chat_id,)
    ).fetchone()
    return int(row[0])


def _append_message(conn: sqlite3.Connection, chat_id: str, message: PersistedMessage) -> None:
    conn.execute(
        "INSERT INTO messages (chat_id, seq, id, role, created_at, body, replay) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            chat_id,
            _next_seq(conn, chat_id),
            message.id,
            message.role,
            message.created_at,
            msgspec.json.encode(message),
            replay_text(message),
        ),
    )


def _replay(conn: sqlite3.Connection, chat_id: str, limit: int) -> list[ChatTurn]:
    """The last ``limit`` messages as replay turns, oldest first: their ``replay``
    column only, so a huge message costs nothing here."""
    if limit <= 0:
        return []
    rows = conn.execute(
        "SELECT role, replay, created_at FROM messages WHERE chat_id = ? ORDER BY seq DESC LIMIT ?",
        (chat_id, limit),
    ).fetchall()
    return [ChatTurn(row[0], row[1], row[2]) for row in reversed(rows)]


def _release_lock(conn: sqlite3.Connection, chat_id: str, holder: str) -> None:
    conn.execute(
        "UPDATE chats SET lock_holder = NULL, lock_message_id = NULL, "
        "lock_user_message_id = NULL, lock_session_id = NULL, lock_expires_at = NULL "
        "WHERE id = ? AND lock_holder = ?",
        (chat_id, holder),
    )


def _settle_session(conn: sqlite3.Connection, session_id: str, now: int) -> None:
    """Mark the session settled; its unused tokens expire now."""
    conn.execute(
        "UPDATE sessions SET settled_at = COALESCE(settled_at, ?) WHERE id = ?", (now, session_id)
    )
    conn.execute(
        "UPDATE tokens SET expires_at = MIN(expires_at, ?) "
        "WHERE session_id = ? AND used_at IS NULL",
        (now, session_id),
    )


def _result_files(conn: sqlite3.Connection, session_id: str) -> list[BagFile]:
    rows = conn.execute(
        "SELECT * FROM bag_files WHERE session_id = ? AND source = 'result' "
        "AND deleted_at IS NULL ORDER BY created_at, rowid",
        (session_id,),
    ).fetchall()
    return [_bag_file(row) for row in rows]


def _recover_lost_turn(conn: sqlite3.Connection, row: sqlite3.Row, now: int) -> str | None:
    """Settle the turn of an expired lock: write its assistant message as failed.

    Returns the message id written, or ``None`` if the message already exists.
    """
    chat_id: str = row["id"]
    message_id: str | None = row["lock_message_id"]
    session_id: str | None = row["lock_session_id"]
    if session_id is not None:
        _settle_session(conn, session_id, now)
        _mark_turn_settled(conn, session_id, now)
    if message_id is None:
        return None
    exists = conn.execute("SELECT 1 FROM messages WHERE id = ?", (message_id,)).fetchone()
    if exists is not None:
        return None
    files = _result_files(conn, session_id) if session_id is not None else []
    conn.execute(
        "UPDATE bag_files SET message_id = ? WHERE session_id = ? AND source = 'result'",
        (message_id, session_id),
    )
    message = PersistedMessage(
        id=message_id,
        role="assistant",
        content=[
            ErrorBlock(
                TURN_LOST,
                "the server running this turn stopped before it settled; "
                "its lock expired and the turn was given up",
            )
        ],
        created_at=now,
        file_attachments=[f.attachment() for f in files],
        status="failed",
    )
    _append_message(conn, chat_id, message)
    log.warning("chat %s: lock of a dead turn expired; message %s marked lost", chat_id, message_id)
    return message_id


def _session_may_run(conn: sqlite3.Connection, turn_id: str | None) -> bool:
    """Whether the turn ``turn_id`` has a runner session that has not settled."""
    row = conn.execute("SELECT state FROM chat_turns WHERE id = ?", (turn_id,)).fetchone()
    return row is not None and row[0] == "running"


def _mark_turn_settled(conn: sqlite3.Connection, turn_id: str, now: int) -> None:
    conn.execute(
        "UPDATE chat_turns SET state = 'settled', settled_at = ? "
        "WHERE id = ? AND state != 'settled'",
        (now, turn_id),
    )


_TURN_COLUMNS: Final = (
    "id, chat_id, workspace_id, session_id, runner_url, assistant_message_id, "
    "user_message_id, on_disconnect, state, created_at"
)


def _turn(row: sqlite3.Row) -> TurnRecord:
    return msgspec.convert(dict(zip(row.keys(), row, strict=True)), TurnRecord)


def _finish(conn: sqlite3.Connection, finish: TurnFinish) -> PersistedMessage:
    """Append the settled assistant message, settle the session, release the lock."""
    files = _result_files(conn, finish.session_id)
    conn.execute(
        "UPDATE bag_files SET message_id = ? WHERE session_id = ? AND source = 'result'",
        (finish.message.id, finish.session_id),
    )
    message = msgspec.structs.replace(
        finish.message,
        file_attachments=[*finish.message.file_attachments, *(f.attachment() for f in files)],
    )
    cursor = conn.execute(
        "UPDATE messages SET body = ?, replay = ?, created_at = ? WHERE id = ? AND chat_id = ?",
        (
            msgspec.json.encode(message),
            replay_text(message),
            message.created_at,
            message.id,
            finish.chat_id,
        ),
    )
    if cursor.rowcount == 0:  # normally; else it was marked lost meanwhile
        _append_message(conn, finish.chat_id, message)
    _settle_session(conn, finish.session_id, finish.now)
    _mark_turn_settled(conn, finish.session_id, finish.now)
    _release_lock(conn, finish.chat_id, finish.holder)
    conn.execute(
        "UPDATE chats SET updated_at = MAX(updated_at, ?) WHERE id = ?",
        (finish.now, finish.chat_id),
    )
    return message


def _insert_tokens(
    conn: sqlite3.Connection, session_id: str, tokens: Sequence[TokenMint], now: int
) -> None:
    conn.executemany(
        "INSERT INTO tokens (hash, purpose, session_id, created_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?)",
        [(t.hash, t.purpose, session_id, now, t.expires_at) for t in tokens],
    )


def _insert_session(conn: sqlite3.Connection, session: DispatchRecord) -> None:
    conn.execute(
        "INSERT INTO sessions (id, kind, workspace_id, chat_id, workflow_id, user_message_id, "
        "assistant_message_id, prompt, conversation, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session.id,
            session.kind,
            session.workspace_id,
            session.chat_id,
            session.workflow_id,
            session.user_message_id,
            session.assistant_message_id,
            session.prompt,
            msgspec.json.encode(session.conversation),
            session.created_at,
        ),
    )


def _insert_files(
    conn: sqlite3.Connection,
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
    conn.executemany(
        "INSERT INTO bag_files (id, workspace_id, chat_id, session_id, name, size, content_type, "
        "sha256, source, created_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                f.id,
                f.workspace_id,
                f.chat_id,
                f.session_id,
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
    return files


class SQLiteChatStore:
    """:class:`~.store.ChatStore` on a SQLite database. Open with :meth:`open`."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self.db = db

    @classmethod
    async def open(cls, data_dir: Path, *, readers: int = 4) -> SQLiteChatStore:
        """Open (creating and migrating) ``data_dir/chat.sqlite3``.

        Raises :class:`~.errors.StoreError` for a database newer than this code,
        :class:`sqlite3.Error` or :class:`OSError` if it cannot be opened.
        """
        return cls(
            await SQLiteDatabase.open(
                data_dir / DATABASE_NAME, migrate=migrate, readers=readers, page_size=PAGE_SIZE
            )
        )

    async def close(self) -> None:
        await self.db.close()

    # -- chats ---------------------------------------------------------------------

    async def create_chat(
        self, *, workspace_id: str, workflow_id: str | None, title: str | None, now: int
    ) -> Chat:
        chat_id = new_id("chat")

        def run(conn: sqlite3.Connection) -> Chat:
            conn.execute(
                "INSERT INTO chats (id, workspace_id, workflow_id, title, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (chat_id, workspace_id, workflow_id, title, now, now),
            )
            return _chat(_load_chat(conn, workspace_id, chat_id), now)

        return await self.db.write(run)

    async def list_chats(self, workspace_id: str, *, limit: int, now: int) -> list[Chat]:
        def run(conn: sqlite3.Connection) -> list[Chat]:
            rows = conn.execute(
                f"SELECT {_CHAT_COLUMNS} FROM chats WHERE workspace_id = ? AND deleted_at IS NULL "
                "ORDER BY updated_at DESC, id LIMIT ?",
                (workspace_id, limit),
            ).fetchall()
            return [_chat(row, now) for row in rows]

        return await self.db.read(run)

    async def get_chat(self, workspace_id: str, chat_id: str, *, now: int) -> Chat:
        return await self.db.read(lambda conn: _chat(_load_chat(conn, workspace_id, chat_id), now))

    async def get_messages(
        self, workspace_id: str, chat_id: str, *, limit: int | None = None
    ) -> list[PersistedMessage]:
        def run(conn: sqlite3.Connection) -> list[PersistedMessage]:
            _load_chat(conn, workspace_id, chat_id)
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
        def run(conn: sqlite3.Connection) -> None:
            row = _load_chat(conn, workspace_id, chat_id)
            if _locked(row, now):
                raise ChatBusyError(
                    chat_id,
                    row["lock_message_id"],
                    row["lock_user_message_id"],
                    row["lock_expires_at"],
                )
            conn.execute("UPDATE chats SET deleted_at = ? WHERE id = ?", (now, chat_id))
            conn.execute(
                "UPDATE bag_files SET deleted_at = ? WHERE chat_id = ? AND deleted_at IS NULL",
                (now, chat_id),
            )

        await self.db.write(run)

    # -- turns -----------------------------------------------------------------------

    async def begin_turn(self, request: TurnRequest) -> TurnStart:
        return await self.db.write(lambda conn: self._begin_turn(conn, request))

    def _begin_turn(self, conn: sqlite3.Connection, req: TurnRequest) -> TurnStart:
        now = req.now
        recovered: str | None = None
        created = req.chat_id is None
        if req.chat_id is None:
            chat_id = new_id("chat")
            conn.execute(
                "INSERT INTO chats (id, workspace_id, workflow_id, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (chat_id, req.workspace_id, req.workflow_id, now, now),
            )
        else:
            chat_id = req.chat_id
            row = _load_chat(conn, req.workspace_id, chat_id)
            if _locked(row, now):
                raise ChatBusyError(
                    chat_id,
                    row["lock_message_id"],
                    row["lock_user_message_id"],
                    row["lock_expires_at"],
                )
            if row["lock_holder"] is not None:
                if _session_may_run(conn, row["lock_session_id"]):
                    raise ChatBusyError(
                        chat_id,
                        row["lock_message_id"],
                        row["lock_user_message_id"],
                        row["lock_expires_at"],
                        adoptable=True,
                    )
                recovered = _recover_lost_turn(conn, row, now)
        attachments = self._resolve_attachments(conn, req, chat_id)
        conn.execute(
            "UPDATE chats SET lock_holder = ?, lock_message_id = ?, lock_user_message_id = ?, "
            "lock_session_id = ?, lock_expires_at = ?, updated_at = ?, "
            "conversation_id = COALESCE(conversation_id, ?), title = COALESCE(title, ?) "
            "WHERE id = ?",
            (
                req.holder,
                req.assistant_message_id,
                req.user_message_id,
                req.session_id,
                req.lease_expires_at,
                now,
                req.user_message_id,
                _title(req.text),
                chat_id,
            ),
        )
        conversation = _replay(conn, chat_id, req.replay_limit)
        message = user_message(
            req.user_message_id,
            req.text,
            created_at=now,
            attachments=[f.attachment() for f in attachments],
        )
        _append_message(conn, chat_id, message)
        session = DispatchRecord(
            id=req.session_id,
            kind="chat",
            workspace_id=req.workspace_id,
            chat_id=chat_id,
            workflow_id=req.workflow_id,
            user_message_id=req.user_message_id,
            assistant_message_id=req.assistant_message_id,
            prompt=req.text,
            conversation=conversation,
            created_at=now,
        )
        _insert_session(conn, session)
        _insert_tokens(conn, session.id, req.tokens, now)
        conn.execute(
            "INSERT INTO chat_turns (id, chat_id, workspace_id, runner_url, assistant_message_id, "
            "user_message_id, on_disconnect, state, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 'starting', ?)",
            (
                session.id,
                chat_id,
                req.workspace_id,
                req.runner_url,
                req.assistant_message_id,
                req.user_message_id,
                req.on_disconnect,
                now,
            ),
        )
        chat = _chat(_load_chat(conn, req.workspace_id, chat_id), now)
        return TurnStart(
            chat=chat,
            created=created,
            user_message=message,
            session=session,
            holder=req.holder,
            recovered_message_id=recovered,
        )

    @staticmethod
    def _resolve_attachments(
        conn: sqlite3.Connection, req: TurnRequest, chat_id: str
    ) -> list[BagFile]:
        wanted = list(dict.fromkeys(req.attachment_ids))
        if not wanted:
            return []
        marks = ", ".join("?" for _ in wanted)
        rows = conn.execute(
            f"SELECT * FROM bag_files WHERE id IN ({marks}) AND chat_id = ? "
            "AND workspace_id = ? AND deleted_at IS NULL",
            (*wanted, chat_id, req.workspace_id),
        ).fetchall()
        found = {row["id"]: _bag_file(row) for row in rows}
        unknown = [file_id for file_id in wanted if file_id not in found]
        if unknown:
            raise AttachmentError(unknown)
        return [found[file_id] for file_id in wanted]

    async def abort_turn(self, start: TurnStart) -> None:
        def run(conn: sqlite3.Connection) -> None:
            session = start.session
            chat_id = start.chat.id
            conn.execute("DELETE FROM tokens WHERE session_id = ?", (session.id,))
            conn.execute("DELETE FROM chat_turns WHERE id = ?", (session.id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (session.id,))
            conn.execute("DELETE FROM messages WHERE id = ?", (start.user_message.id,))
            if start.created:
                conn.execute("DELETE FROM chats WHERE id = ?", (chat_id,))
                return
            conn.execute(
                "UPDATE chats SET lock_holder = NULL, lock_message_id = NULL, "
                "lock_user_message_id = NULL, lock_session_id = NULL, lock_expires_at = NULL, "
                "conversation_id = NULLIF(conversation_id, ?) WHERE id = ? AND lock_holder = ?",
                (start.user_message.id, chat_id, start.holder),
            )

        await self.db.write(run)

    async def renew_lock(self, chat_id: str, holder: str, expires_at: int) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE chats SET lock_expires_at = ? WHERE id = ? AND lock_holder = ?",
                (expires_at, chat_id, holder),
            )
            return cursor.rowcount == 1

        return await self.db.write(run)

    async def finish_turn(self, finish: TurnFinish) -> PersistedMessage:
        return await self.db.write(lambda conn: _finish(conn, finish))

    async def attach_runner_session(self, turn_id: str, session_id: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE chat_turns SET session_id = ?, state = 'running' "
                "WHERE id = ? AND state = 'starting'",
                (session_id, turn_id),
            )

        await self.db.write(run)

    async def get_turn(self, session_id: str) -> TurnRecord | None:
        def run(conn: sqlite3.Connection) -> TurnRecord | None:
            row = conn.execute(
                f"SELECT {_TURN_COLUMNS} FROM chat_turns WHERE session_id = ?", (session_id,)
            ).fetchone()
            return None if row is None else _turn(row)

        return await self.db.read(run)

    async def latest_turn(self, workspace_id: str, chat_id: str) -> TurnRecord | None:
        def run(conn: sqlite3.Connection) -> TurnRecord | None:
            _load_chat(conn, workspace_id, chat_id)
            row = conn.execute(
                f"SELECT {_TURN_COLUMNS} FROM chat_turns WHERE chat_id = ? "
                "ORDER BY created_at DESC, rowid DESC LIMIT 1",
                (chat_id,),
            ).fetchone()
            return None if row is None else _turn(row)

        return await self.db.read(run)

    async def running_turns(self) -> list[TurnRecord]:
        def run(conn: sqlite3.Connection) -> list[TurnRecord]:
            rows = conn.execute(
                f"SELECT {_TURN_COLUMNS} FROM chat_turns WHERE state = 'running' "
                "ORDER BY created_at"
            ).fetchall()
            return [_turn(row) for row in rows]

        return await self.db.read(run)

    async def hold_turn_lock(self, session_id: str, holder: str, expires_at: int) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE chats SET lock_holder = ?, lock_expires_at = ? WHERE lock_session_id = "
                "(SELECT id FROM chat_turns WHERE session_id = ? AND state = 'running')",
                (holder, expires_at, session_id),
            )
            return cursor.rowcount == 1

        return await self.db.write(run)

    async def append_user_message(
        self, workspace_id: str, chat_id: str, message: PersistedMessage, now: int
    ) -> None:
        def run(conn: sqlite3.Connection) -> None:
            _load_chat(conn, workspace_id, chat_id)
            _append_message(conn, chat_id, message)
            conn.execute(
                "UPDATE chats SET updated_at = MAX(updated_at, ?) WHERE id = ?", (now, chat_id)
            )

        await self.db.write(run)

    async def turn_result_files(self, turn_id: str) -> list[BagFile]:
        return await self.db.read(lambda conn: _result_files(conn, turn_id))

    async def settle_turn(
        self, turn_id: str, message: PersistedMessage, now: int, *, generation: int | None = None
    ) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT t.chat_id, t.state, t.session_id, c.lock_holder, c.lock_session_id "
                "FROM chat_turns AS t JOIN chats AS c ON c.id = t.chat_id WHERE t.id = ?",
                (turn_id,),
            ).fetchone()
            if row is None or row["state"] == "settled":
                return False
            if generation is not None and row["session_id"] is not None:
                check_fence(conn, row["session_id"], generation)
            holder = row["lock_holder"] if row["lock_session_id"] == turn_id else None
            finish = TurnFinish(
                chat_id=row["chat_id"],
                session_id=turn_id,
                holder=holder or "",
                message=message,
                now=now,
            )
            _finish(conn, finish)
            return True

        return await self.db.write(run)

    async def sweep_lost_turns(self, *, now: int, spare: Collection[str] = ()) -> list[str]:
        def run(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT id, lock_holder, lock_message_id, lock_session_id FROM chats "
                "WHERE lock_holder IS NOT NULL AND lock_expires_at <= ?",
                (now,),
            ).fetchall()
            settled: list[str] = []
            for row in rows:
                if row["lock_session_id"] in spare:
                    continue
                _recover_lost_turn(conn, row, now)
                _release_lock(conn, row["id"], row["lock_holder"])
                conn.execute(
                    "UPDATE chats SET updated_at = MAX(updated_at, ?) WHERE id = ?",
                    (now, row["id"]),
                )
                settled.append(row["id"])
            return settled

        return await self.db.write(run)

    # -- sessions and tokens -------------------------------------------------------------

    async def record_dispatch(self, session: DispatchRecord, tokens: list[TokenMint]) -> None:
        def run(conn: sqlite3.Connection) -> None:
            _insert_session(conn, session)
            _insert_tokens(conn, session.id, tokens, session.created_at)

        await self.db.write(run)

    async def close_dispatch(self, session_id: str, *, now: int) -> None:
        await self.db.write(lambda conn: _settle_session(conn, session_id, now))

    async def consume_token(
        self, token_hash: str, *, purpose: Purpose, session_id: str, now: int
    ) -> DispatchRecord:
        def run(conn: sqlite3.Connection) -> DispatchRecord:
            cursor = conn.execute(
                "UPDATE tokens SET used_at = ? WHERE hash = ? AND used_at IS NULL "
                "AND expires_at > ? AND purpose = ? AND session_id = ?",
                (now, token_hash, now, purpose, session_id),
            )
            if cursor.rowcount != 1:
                raise TokenRejectedError(_why_rejected(conn, token_hash, purpose, session_id, now))
            row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:  # pragma: no cover - tokens reference sessions
                raise TokenRejectedError("the token's session is gone")
            return _session(row)

        return await self.db.write(run)

    async def check_token(
        self, token_hash: str, *, purpose: Purpose, session_id: str, now: int
    ) -> DispatchRecord:
        def run(conn: sqlite3.Connection) -> DispatchRecord:
            row = conn.execute(
                "SELECT s.* FROM tokens t JOIN sessions s ON s.id = t.session_id "
                "WHERE t.hash = ? AND t.purpose = ? AND t.session_id = ? "
                "AND t.expires_at > ? AND s.settled_at IS NULL",
                (token_hash, purpose, session_id, now),
            ).fetchone()
            if row is None:
                raise TokenRejectedError(f"{purpose} token refused for session {session_id!r}")
            return _session(row)

        return await self.db.read(run)

    # -- the chat bag --------------------------------------------------------------------

    async def add_uploads(
        self, workspace_id: str, chat_id: str, blobs: list[NewBlob], *, now: int
    ) -> list[BagFile]:
        def run(conn: sqlite3.Connection) -> list[BagFile]:
            _load_chat(conn, workspace_id, chat_id)
            return _insert_files(
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
        def run(conn: sqlite3.Connection) -> list[BagFile]:
            deleted_at: int | None = None
            if session.chat_id is not None:
                row = conn.execute(
                    "SELECT deleted_at FROM chats WHERE id = ?", (session.chat_id,)
                ).fetchone()
                deleted_at = None if row is None else row["deleted_at"]
            return _insert_files(
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
        def run(conn: sqlite3.Connection) -> list[BagFile]:
            _load_chat(conn, workspace_id, chat_id)
            rows = conn.execute(
                "SELECT * FROM bag_files WHERE chat_id = ? AND workspace_id = ? "
                "AND deleted_at IS NULL ORDER BY created_at, rowid",
                (chat_id, workspace_id),
            ).fetchall()
            return [_bag_file(row) for row in rows]

        return await self.db.read(run)

    async def get_file(self, workspace_id: str, chat_id: str, file_id: str) -> BagFile:
        def run(conn: sqlite3.Connection) -> BagFile:
            _load_chat(conn, workspace_id, chat_id)
            row = conn.execute(
                "SELECT * FROM bag_files WHERE id = ? AND chat_id = ? AND workspace_id = ? "
                "AND deleted_at IS NULL",
                (file_id, chat_id, workspace_id),
            ).fetchone()
            if row is None:
                raise FileNotFoundInBagError(file_id)
            return _bag_file(row)

        return await self.db.read(run)

    async def list_run_files(self, workspace_id: str, session_id: str) -> list[BagFile]:
        def run(conn: sqlite3.Connection) -> list[BagFile]:
            _load_agents_run(conn, workspace_id, session_id)
            return _result_files(conn, session_id)

        return await self.db.read(run)

    async def get_run_file(self, workspace_id: str, session_id: str, file_id: str) -> BagFile:
        def run(conn: sqlite3.Connection) -> BagFile:
            _load_agents_run(conn, workspace_id, session_id)
            row = conn.execute(
                "SELECT * FROM bag_files WHERE id = ? AND session_id = ? AND source = 'result' "
                "AND deleted_at IS NULL",
                (file_id, session_id),
            ).fetchone()
            if row is None:
                raise FileNotFoundInBagError(file_id, "this run")
            return _bag_file(row)

        return await self.db.read(run)

    async def turn_attachments(self, session: DispatchRecord) -> list[BagFile]:
        def run(conn: sqlite3.Connection) -> list[BagFile]:
            if session.chat_id is None or session.user_message_id is None:
                return []
            row = conn.execute(
                "SELECT body FROM messages WHERE chat_id = ? AND id = ?",
                (session.chat_id, session.user_message_id),
            ).fetchone()
            if row is None:
                return []
            wanted = [a.id for a in _message_decoder.decode(row[0]).file_attachments]
            if not wanted:
                return []
            marks = ", ".join("?" for _ in wanted)
            rows = conn.execute(
                f"SELECT * FROM bag_files WHERE id IN ({marks}) AND chat_id = ? "
                "AND deleted_at IS NULL",
                (*wanted, session.chat_id),
            ).fetchall()
            found = {r["id"]: _bag_file(r) for r in rows}
            return [found[file_id] for file_id in wanted if file_id in found]

        return await self.db.read(run)

    # -- workflow environments -------------------------------------------------------------

    async def get_environment(self, workspace_id: str, workflow_id: str) -> Environment | None:
        def run(conn: sqlite3.Connection) -> Environment | None:
            row = conn.execute(
                "SELECT * FROM workflow_environments WHERE workspace_id = ? AND workflow_id = ?",
                (workspace_id, workflow_id),
            ).fetchone()
            if row is None:
                return None
            return Environment(
                workspace_id=workspace_id,
                workflow_id=workflow_id,
                vars=_vars_decoder.decode(row["vars"]),
                setup_script=row["setup_script"],
                updated_at=row["updated_at"],
            )

        return await self.db.read(run)

    async def put_environment(self, environment: Environment) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO workflow_environments "
                "(workspace_id, workflow_id, vars, setup_script, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (workspace_id, workflow_id) DO UPDATE SET "
                "vars = excluded.vars, setup_script = excluded.setup_script, "
                "updated_at = excluded.updated_at",
                (
                    environment.workspace_id,
                    environment.workflow_id,
                    msgspec.json.encode(environment.vars),
                    environment.setup_script,
                    environment.updated_at,
                ),
            )

        await self.db.write(run)


def _load_agents_run(conn: sqlite3.Connection, workspace_id: str, session_id: str) -> None:
    """Raise :class:`RunNotFoundError` unless ``session_id`` is an Agents-block run of
    ``workspace_id``."""
    row = conn.execute(
        "SELECT 1 FROM sessions WHERE id = ? AND workspace_id = ? AND kind = 'agents'",
        (session_id, workspace_id),
    ).fetchone()
    if row is None:
        raise RunNotFoundError(session_id)


def _why_rejected(
    conn: sqlite3.Connection, token_hash: str, purpose: Purpose, session_id: str, now: int
) -> str:
    """A reason for the logs (the client only ever learns "401")."""
    row: Any = conn.execute(
        "SELECT purpose, session_id, expires_at, used_at FROM tokens WHERE hash = ?",
        (token_hash,),
    ).fetchone()
    if row is None:
        return "unknown token"
    if row["purpose"] != purpose:
        return f"token is for {row['purpose']}, not {purpose}"
    if row["session_id"] != session_id:
        return "token belongs to another session"
    if row["used_at"] is not None:
        return "token already used"
    if row["expires_at"] <= now:
        return "token expired"
    return "token refused"  # pragma: no cover - a concurrent redemption won the race
