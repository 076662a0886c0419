"""The embedded store: :class:`SQLiteChatStore`, the :class:`~..contract.ChatStore` on
SQLite, composed of one part per concern (:mod:`.chats`, :mod:`.turns`,
:mod:`.dispatch`, :mod:`.bag_files`, :mod:`.environments`).

One file, ``chat.sqlite3``, WAL mode, every call in a worker thread; writes that belong
together run in one ``BEGIN IMMEDIATE`` transaction, so several processes may share it.
Bad input: :meth:`SQLiteChatStore.open` raises :class:`~...errors.StoreError` for a
database newer than this code. Cancellation: a call that started runs to completion in
its worker thread; the caller does not learn its outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from sandstream.server.sqlite import SQLiteDatabase

from ..migrations import migrate
from .bag_files import BagFiles
from .chats import Chats
from .dispatch import Dispatches
from .environments import Environments
from .turns import Turns

__all__ = ["DATABASE_NAME", "SQLiteChatStore"]

DATABASE_NAME: Final = "chat.sqlite3"
PAGE_SIZE: Final = 32 * 1024
"""The page size of a new chat database (an existing one keeps its own; why 32 KiB:
docs/chat.md, "Storage")."""


class SQLiteChatStore(Chats, Turns, Dispatches, BagFiles, Environments):
    """:class:`~..contract.ChatStore` on a SQLite database. Open with :meth:`open`."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self.db = db

    @classmethod
    async def open(cls, data_dir: Path, *, readers: int = 4) -> SQLiteChatStore:
        """Open (creating and migrating) ``data_dir/chat.sqlite3``.

        Raises :class:`~...errors.StoreError` for a database newer than this code,
        :class:`sqlite3.Error` or :class:`OSError` if it cannot be opened.
        """
        return cls(
            await SQLiteDatabase.open(
                data_dir / DATABASE_NAME, migrate=migrate, readers=readers, page_size=PAGE_SIZE
            )
        )

    async def close(self) -> None:
        await self.db.close()
