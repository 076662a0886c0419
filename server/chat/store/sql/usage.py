"""The tokens chats and workspaces spent, in the chat store: ``chat_usage`` (per chat)
and ``workspace_usage`` (per workspace and UTC day).

The settle transaction of a turn (:mod:`.turns`) adds its message's
:class:`~sandstream.core.MessageUsage` to both (:func:`record_usage`; a message
without one adds nothing), counted on the UTC day it settles. Deleting a chat deletes
its row of ``chat_usage``; the workspace's days stay (what was spent was spent).
:class:`UsageTotals` holds the :class:`~..contract.ChatStore` methods that read them.

Bad input: :class:`~sandstream.server.chat.model.ChatNotFoundError` for a chat of another
workspace or a deleted one. Cancellation: a call that started runs to completion in
its worker thread (:mod:`..database`).
"""

from __future__ import annotations

import datetime
from typing import Any, Final

from sandstream.core import MessageUsage, PersistedMessage

from ..database import Connection, Database
from .chats import load_chat

__all__ = ["UsageTotals", "record_usage", "utc_day"]

_COUNTS: Final = (
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "model_calls",
)
_SELECT: Final = ", ".join(_COUNTS)


def utc_day(ms: int) -> str:
    """The UTC day of epoch milliseconds ``ms``, ``YYYY-MM-DD``."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).date().isoformat()


def _add(table: str, keys: tuple[str, ...]) -> str:
    """Insert a row of ``table`` or add to the one its ``keys`` name."""
    columns = (*keys, *_COUNTS)
    marks = ", ".join("?" for _ in columns)
    sums = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in _COUNTS)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sums}"
    )


_ADD_CHAT: Final = _add("chat_usage", ("chat_id",))
_ADD_DAY: Final = _add("workspace_usage", ("workspace_id", "day"))


def record_usage(conn: Connection, chat_id: str, message: PersistedMessage, now: int) -> None:
    """Add ``message``'s usage (the turn's assistant message) to its chat's total and
    to its workspace's for the UTC day of ``now``."""
    usage = message.usage
    if usage is None:
        return
    counts = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens,
        usage.cache_write_tokens,
        usage.model_calls,
    )
    row = conn.execute("SELECT workspace_id FROM chats WHERE id = ?", (chat_id,)).fetchone()
    conn.execute(_ADD_CHAT, (chat_id, *counts))
    if row is not None:
        conn.execute(_ADD_DAY, (row["workspace_id"], utc_day(now), *counts))


def _usage(row: Any) -> MessageUsage:
    if row is None:
        return MessageUsage()
    return MessageUsage(*(int(row[c]) for c in _COUNTS))


class UsageTotals:
    """The :class:`~..contract.ChatStore` methods on the tokens spent."""

    db: Database

    async def chat_usage(self, workspace_id: str, chat_id: str) -> MessageUsage:
        def run(conn: Connection) -> MessageUsage:
            load_chat(conn, workspace_id, chat_id)
            row = conn.execute(
                f"SELECT {_SELECT} FROM chat_usage WHERE chat_id = ?", (chat_id,)
            ).fetchone()
            return _usage(row)

        return await self.db.read(run)

    async def workspace_usage(self, workspace_id: str, day: str) -> MessageUsage:
        def run(conn: Connection) -> MessageUsage:
            row = conn.execute(
                f"SELECT {_SELECT} FROM workspace_usage WHERE workspace_id = ? AND day = ?",
                (workspace_id, day),
            ).fetchone()
            return _usage(row)

        return await self.db.read(run)
