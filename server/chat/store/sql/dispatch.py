"""Dispatch records and one-time tokens in the chat store: ``sessions`` and ``tokens``.

A dispatch record is one run sent to a runner (its prompt and replayed conversation, for
the sandbox's callbacks); its one-time tokens are stored hashed, each redeemed once by
one conditional ``UPDATE`` (and again, changing nothing, by a retried callback carrying
the idempotency key it was redeemed with, while its session is unsettled).
:class:`Dispatches` holds the :class:`~..contract.ChatStore` methods on them; the
functions are steps :mod:`.turns` and :mod:`.bag_files` share.
Bad input: :class:`~sandstream.server.chat.model.TokenRejectedError`,
:class:`~sandstream.server.chat.model.RunNotFoundError`. Cancellation: a call that started runs to
completion in its worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from sandstream.core import ChatTurn
from sandstream.server.chat.model import (
    DispatchRecord,
    Purpose,
    RunNotFoundError,
    TokenMint,
    TokenRejectedError,
)

from ..database import Connection, Database

__all__ = [
    "Dispatches",
    "insert_dispatch",
    "insert_tokens",
    "load_agents_run",
    "settle_dispatch",
]

_conversation_decoder: Final = msgspec.json.Decoder(list[ChatTurn])


def _dispatch(row: Any) -> DispatchRecord:
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


def insert_dispatch(conn: Connection, session: DispatchRecord) -> None:
    """Store a new dispatch record."""
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


def insert_tokens(conn: Connection, session_id: str, tokens: Sequence[TokenMint], now: int) -> None:
    """Store the one-time tokens of dispatch ``session_id`` (their hashes)."""
    conn.executemany(
        "INSERT INTO tokens (hash, purpose, session_id, created_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?)",
        [(t.hash, t.purpose, session_id, now, t.expires_at) for t in tokens],
    )


def settle_dispatch(conn: Connection, session_id: str, now: int) -> None:
    """Mark the dispatch settled; its unused tokens expire now."""
    conn.execute(
        "UPDATE sessions SET settled_at = COALESCE(settled_at, ?) WHERE id = ?", (now, session_id)
    )
    conn.execute(
        "UPDATE tokens SET expires_at = ? WHERE session_id = ? AND used_at IS NULL "
        "AND expires_at > ?",
        (now, session_id, now),
    )


def load_agents_run(conn: Connection, workspace_id: str, session_id: str) -> None:
    """Raise :class:`RunNotFoundError` unless ``session_id`` is an Agents-block run of
    ``workspace_id``."""
    row = conn.execute(
        "SELECT 1 FROM sessions WHERE id = ? AND workspace_id = ? AND kind = 'agents'",
        (session_id, workspace_id),
    ).fetchone()
    if row is None:
        raise RunNotFoundError(session_id)


def _why_rejected(
    conn: Connection, token_hash: str, purpose: Purpose, session_id: str, now: int
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


class Dispatches:
    """The :class:`~..contract.ChatStore` methods on dispatch records and tokens."""

    db: Database

    async def record_dispatch(self, session: DispatchRecord, tokens: list[TokenMint]) -> None:
        def run(conn: Connection) -> None:
            insert_dispatch(conn, session)
            insert_tokens(conn, session.id, tokens, session.created_at)

        await self.db.write(run)

    async def close_dispatch(self, session_id: str, *, now: int) -> None:
        await self.db.write(lambda conn: settle_dispatch(conn, session_id, now))

    async def consume_token(
        self,
        token_hash: str,
        *,
        purpose: Purpose,
        session_id: str,
        now: int,
        idempotency_key: str | None = None,
    ) -> DispatchRecord:
        def run(conn: Connection) -> DispatchRecord:
            cursor = conn.execute(
                "UPDATE tokens SET used_at = COALESCE(used_at, ?), redeemed_with = ? "
                "WHERE hash = ? AND expires_at > ? AND purpose = ? AND session_id = ? "
                "AND (used_at IS NULL OR (redeemed_with = ? AND EXISTS ("
                "SELECT 1 FROM sessions s WHERE s.id = tokens.session_id "
                "AND s.settled_at IS NULL)))",
                (now, idempotency_key, token_hash, now, purpose, session_id, idempotency_key),
            )
            if cursor.rowcount != 1:
                raise TokenRejectedError(_why_rejected(conn, token_hash, purpose, session_id, now))
            row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:  # pragma: no cover - tokens reference sessions
                raise TokenRejectedError("the token's session is gone")
            return _dispatch(row)

        return await self.db.write(run)

    async def check_token(
        self, token_hash: str, *, purpose: Purpose, session_id: str, now: int
    ) -> DispatchRecord:
        def run(conn: Connection) -> DispatchRecord:
            row = conn.execute(
                "SELECT s.* FROM tokens t JOIN sessions s ON s.id = t.session_id "
                "WHERE t.hash = ? AND t.purpose = ? AND t.session_id = ? "
                "AND t.expires_at > ? AND s.settled_at IS NULL",
                (token_hash, purpose, session_id, now),
            ).fetchone()
            if row is None:
                raise TokenRejectedError(f"{purpose} token refused for session {session_id!r}")
            return _dispatch(row)

        return await self.db.read(run)
