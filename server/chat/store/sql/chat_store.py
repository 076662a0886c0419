"""The chat store: :class:`SqlChatStore`, the :class:`~..contract.ChatStore` composed
of one part per concern (:mod:`.chats`, :mod:`.turns`, :mod:`.dispatch`,
:mod:`.bag_files`, :mod:`.environments`, :mod:`.push`, :mod:`.push_claims`,
:mod:`.snapshots`, :mod:`.grants`, :mod:`.forks`, :mod:`.usage`), on either database:

- :class:`SQLiteChatStore`: one file, ``chat.sqlite3`` in the data dir, WAL mode; the
  bag's blobs are files beside it (:class:`~..bag.BlobStore`);
- :class:`PostgresChatStore`: a PostgreSQL database (``--database-url``), shared by
  replicas on many machines; the bag's blobs are rows of it
  (:class:`~..bag.PostgresBlobStore`).

The parts' transactions are the same SQL on both (:mod:`..database`); what differs is
named here and in the two database modules. Bad input: ``open`` raises
:class:`~sandstream.server.chat.model.StoreError` for a database newer than this code. Cancellation:
a call that started runs to completion in its worker thread; the caller does not learn its outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from sandstream.server.databases import OperationTimes, PostgresDatabase, SQLiteDatabase

from ..bag import BlobStore, PostgresBlobStore
from ..database import Database
from ..leases import DatabaseLease
from ..migrations import migrate, migrate_postgres
from ..moved_runs import MovedChunks
from .bag_files import BagFiles
from .chats import Chats
from .dispatch import Dispatches
from .environments import Environments
from .forks import Forks
from .grants import Grants
from .push import PushNotifications
from .push_claims import PushClaims
from .snapshots import Snapshots
from .turns import Turns
from .usage import UsageTotals

__all__ = ["DATABASE_NAME", "PostgresChatStore", "SQLiteChatStore", "SqlChatStore"]

DATABASE_NAME: Final = "chat.sqlite3"
PAGE_SIZE: Final = 32 * 1024
"""The page size of a new chat database (an existing one keeps its own; why 32 KiB:
docs/chat.md, "Storage")."""


class SqlChatStore(
    Chats,
    Turns,
    Dispatches,
    BagFiles,
    Environments,
    PushNotifications,
    PushClaims,
    Snapshots,
    Grants,
    Forks,
    UsageTotals,
):
    """:class:`~..contract.ChatStore` on ``db``, with the log mover's tables there; it
    also gives the bag's blob store and closes (what the code that opens it needs)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.moved_chunks = MovedChunks(db)
        self.lease = DatabaseLease(db)

    def blob_store(self, root: Path) -> BlobStore:
        """The chat bag's bytes: files under ``root`` (SQLite), or rows of the database
        (PostgreSQL: replicas share nothing else; ``root`` then only holds uploads in
        progress)."""
        return BlobStore(root)

    @property
    def operations(self) -> OperationTimes:
        return self.db.operations

    async def ping(self, timeout: float) -> None:
        await self.db.ping(timeout)

    async def close(self) -> None:
        """Release the store's connections. Idempotent."""
        await self.db.close()


class SQLiteChatStore(SqlChatStore):
    """The store on a SQLite file. Open with :meth:`open`."""

    @classmethod
    async def open(cls, data_dir: Path, *, readers: int = 4) -> SQLiteChatStore:
        """Open (creating and migrating) ``data_dir/chat.sqlite3``.

        Raises :class:`~sandstream.server.chat.model.StoreError` for a database newer than this
        code,
        :class:`sqlite3.Error` or :class:`OSError` if it cannot be opened.
        """
        return cls(
            await SQLiteDatabase.open(
                data_dir / DATABASE_NAME, migrate=migrate, readers=readers, page_size=PAGE_SIZE
            )
        )


class PostgresChatStore(SqlChatStore):
    """The store on a PostgreSQL database, its blobs there too. Open with :meth:`open`."""

    @classmethod
    async def open(cls, url: str, *, connections: int = 8) -> PostgresChatStore:
        """Connect to ``url`` (``postgresql://…``) and migrate the database (replicas
        starting at once take turns: :func:`~..migrations.migrate_postgres`).

        Raises :class:`~sandstream.server.chat.model.StoreError` for a database newer than this
        code,
        :class:`psycopg.Error` if it cannot be reached or used.
        """
        return cls(
            await PostgresDatabase.open(url, migrate=migrate_postgres, connections=connections)
        )

    def blob_store(self, root: Path) -> BlobStore:
        return PostgresBlobStore(root, self.db)
