"""Chat turns and the chat's single-flight lock in the chat store: ``chat_turns`` and
the lock columns of ``chats``.

A turn begins in one transaction (chat, lock, user message, dispatch and tokens, turn
row) and settles in one (assistant message and files, dispatch settled, lock released,
its push alert recorded). An expired lock is taken over, its turn recovered as lost
(``failed``/``turn_lost``) if its session cannot be running; one the sweep recovers
records its alert as a failed turn does (not one a new turn of its chat recovers: its
user is there). :class:`Turns` holds the :class:`~..contract.ChatStore` methods on
turns. Bad input: :class:`~sandstream.server.chat.model.ChatNotFoundError`,
:class:`~sandstream.server.chat.model.ChatBusyError`,
:class:`~sandstream.server.chat.model.AttachmentError`,
:class:`~sandstream.server.chat.model.FencedError`: nothing written. Cancellation: a call that
started runs to completion in its worker thread: callers that must know the outcome shield it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any, Final

import msgspec

from sandstream.core import ErrorBlock, PersistedMessage, replay_text, user_message
from sandstream.server.chat.model import (
    DispatchRecord,
    TurnFinish,
    TurnRecord,
    TurnRequest,
    TurnStart,
    new_id,
)

from ..database import Connection, Database
from ..moved_runs import check_fence
from .bag_files import claim_results, resolve_attachments
from .chats import (
    append_message,
    busy,
    chat_of,
    has_message,
    load_chat,
    locked,
    replay,
    title,
    touch_chat,
)
from .dispatch import insert_dispatch, insert_tokens, settle_dispatch
from .grants import record_grants
from .push import moot_turn_permissions, record_turn_push
from .usage import record_usage

__all__ = ["TURN_LOST", "Turns"]

log = logging.getLogger("sandstream.chat")

TURN_LOST: Final = "turn_lost"
"""Error code of an assistant message written for a turn whose server died."""

_TURN_COLUMNS: Final = (
    "id, chat_id, workspace_id, session_id, runner_url, assistant_message_id, "
    "user_message_id, on_disconnect, state, created_at"
)


def _turn(row: Any) -> TurnRecord:
    return msgspec.convert(dict(zip(row.keys(), row, strict=True)), TurnRecord)


def _release_lock(conn: Connection, chat_id: str, holder: str) -> None:
    conn.execute(
        "UPDATE chats SET lock_holder = NULL, lock_message_id = NULL, "
        "lock_user_message_id = NULL, lock_session_id = NULL, lock_expires_at = NULL "
        "WHERE id = ? AND lock_holder = ?",
        (chat_id, holder),
    )


def _mark_turn_settled(conn: Connection, turn_id: str, now: int) -> None:
    conn.execute(
        "UPDATE chat_turns SET state = 'settled', settled_at = ? "
        "WHERE id = ? AND state != 'settled'",
        (now, turn_id),
    )


def _session_may_run(conn: Connection, turn_id: str | None) -> bool:
    """Whether the turn ``turn_id`` has a runner session that has not settled."""
    row = conn.execute("SELECT state FROM chat_turns WHERE id = ?", (turn_id,)).fetchone()
    return row is not None and row[0] == "running"


def _recover_lost_turn(conn: Connection, row: Any, now: int) -> str | None:
    """Settle the turn of an expired lock: write its assistant message as failed.

    Returns the message id written, or ``None`` if the message already exists.
    """
    chat_id: str = row["id"]
    message_id: str | None = row["lock_message_id"]
    session_id: str | None = row["lock_session_id"]
    if session_id is not None:
        settle_dispatch(conn, session_id, now)
        _mark_turn_settled(conn, session_id, now)
        moot_turn_permissions(conn, session_id, now)
    if message_id is None or has_message(conn, message_id):
        return None
    files = [] if session_id is None else claim_results(conn, session_id, message_id)
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
    append_message(conn, chat_id, message)
    log.warning("chat %s: lock of a dead turn expired; message %s marked lost", chat_id, message_id)
    return message_id


def _finish(conn: Connection, finish: TurnFinish) -> PersistedMessage:
    """Write the settled assistant message, the grants its ``always`` answers give and
    its tokens (the chat's and the workspace's day's totals), settle the dispatch,
    release the lock."""
    files = claim_results(conn, finish.session_id, finish.message.id)
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
        append_message(conn, finish.chat_id, message)
    record_grants(conn, finish.chat_id, message.id, message.content, finish.now)
    record_usage(conn, finish.chat_id, message, finish.now)
    settle_dispatch(conn, finish.session_id, finish.now)
    _mark_turn_settled(conn, finish.session_id, finish.now)
    _release_lock(conn, finish.chat_id, finish.holder)
    touch_chat(conn, finish.chat_id, finish.now)
    record_turn_push(conn, finish.chat_id, finish.session_id, message.status, finish.now)
    return message


def _begin(conn: Connection, req: TurnRequest) -> TurnStart:
    """:meth:`Turns.begin_turn`'s transaction."""
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
        row = load_chat(conn, req.workspace_id, chat_id)
        if locked(row, now):
            raise busy(row)
        if row["lock_holder"] is not None:
            if _session_may_run(conn, row["lock_session_id"]):
                raise busy(row, adoptable=True)
            recovered = _recover_lost_turn(conn, row, now)
    attachments = resolve_attachments(conn, req.workspace_id, chat_id, req.attachment_ids)
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
            title(req.text),
            chat_id,
        ),
    )
    conversation = replay(conn, chat_id, req.replay_limit)
    message = user_message(
        req.user_message_id,
        req.text,
        created_at=now,
        attachments=[f.attachment() for f in attachments],
    )
    append_message(conn, chat_id, message)
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
    insert_dispatch(conn, session)
    insert_tokens(conn, session.id, req.tokens, now)
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
    return TurnStart(
        chat=chat_of(load_chat(conn, req.workspace_id, chat_id)),
        created=created,
        user_message=message,
        session=session,
        holder=req.holder,
        recovered_message_id=recovered,
    )


class Turns:
    """The :class:`~..contract.ChatStore` methods on turns and the chat lock."""

    db: Database

    async def begin_turn(self, request: TurnRequest) -> TurnStart:
        return await self.db.write(lambda conn: _begin(conn, request))

    async def abort_turn(self, start: TurnStart) -> None:
        def run(conn: Connection) -> None:
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
        def run(conn: Connection) -> bool:
            cursor = conn.execute(
                "UPDATE chats SET lock_expires_at = ? WHERE id = ? AND lock_holder = ?",
                (expires_at, chat_id, holder),
            )
            return cursor.rowcount == 1

        return await self.db.write(run)

    async def finish_turn(self, finish: TurnFinish) -> PersistedMessage:
        return await self.db.write(lambda conn: _finish(conn, finish))

    async def attach_runner_session(self, turn_id: str, session_id: str) -> None:
        def run(conn: Connection) -> None:
            conn.execute(
                "UPDATE chat_turns SET session_id = ?, state = 'running' "
                "WHERE id = ? AND state = 'starting'",
                (session_id, turn_id),
            )

        await self.db.write(run)

    async def get_turn(self, session_id: str) -> TurnRecord | None:
        def run(conn: Connection) -> TurnRecord | None:
            row = conn.execute(
                f"SELECT {_TURN_COLUMNS} FROM chat_turns WHERE session_id = ?", (session_id,)
            ).fetchone()
            return None if row is None else _turn(row)

        return await self.db.read(run)

    async def latest_turn(self, workspace_id: str, chat_id: str) -> TurnRecord | None:
        def run(conn: Connection) -> TurnRecord | None:
            load_chat(conn, workspace_id, chat_id)
            row = conn.execute(
                f"SELECT {_TURN_COLUMNS} FROM chat_turns WHERE chat_id = ? "
                "ORDER BY created_at DESC, rowid DESC LIMIT 1",
                (chat_id,),
            ).fetchone()
            return None if row is None else _turn(row)

        return await self.db.read(run)

    async def running_turns(self) -> list[TurnRecord]:
        def run(conn: Connection) -> list[TurnRecord]:
            rows = conn.execute(
                f"SELECT {_TURN_COLUMNS} FROM chat_turns WHERE state = 'running' "
                "ORDER BY created_at"
            ).fetchall()
            return [_turn(row) for row in rows]

        return await self.db.read(run)

    async def hold_turn_lock(self, session_id: str, holder: str, expires_at: int) -> bool:
        def run(conn: Connection) -> bool:
            cursor = conn.execute(
                "UPDATE chats SET lock_holder = ?, lock_expires_at = ? WHERE lock_session_id = "
                "(SELECT id FROM chat_turns WHERE session_id = ? AND state = 'running')",
                (holder, expires_at, session_id),
            )
            return cursor.rowcount == 1

        return await self.db.write(run)

    async def settle_turn(
        self, turn_id: str, message: PersistedMessage, now: int, *, generation: int | None = None
    ) -> bool:
        def run(conn: Connection) -> bool:
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
        def run(conn: Connection) -> list[str]:
            rows = conn.execute(
                "SELECT id, lock_holder, lock_message_id, lock_session_id FROM chats "
                "WHERE lock_holder IS NOT NULL AND lock_expires_at <= ?",
                (now,),
            ).fetchall()
            settled: list[str] = []
            for row in rows:
                if row["lock_session_id"] in spare:
                    continue
                if _recover_lost_turn(conn, row, now) is not None:  # its owner is away
                    record_turn_push(conn, row["id"], row["lock_session_id"], "failed", now)
                _release_lock(conn, row["id"], row["lock_holder"])
                touch_chat(conn, row["id"], now)
                settled.append(row["id"])
            return settled

        return await self.db.write(run)
