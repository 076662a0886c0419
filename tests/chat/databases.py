"""The chat store's database in the chat tests: SQLite or PostgreSQL, per test.

A test module that runs on both says so with ``pytestmark =
pytest.mark.usefixtures("chat_database")`` (tests/chat/conftest.py parametrizes that
fixture: ``sqlite`` and ``postgresql``). The harnesses then open every store through
:func:`open_store` and :func:`open_database`, keyed by the data dir as the SQLite
store is: on PostgreSQL each data dir gets a fresh database of the session's server
(:mod:`benchmarks.support.postgres_server`) the first time it is named, and the same
one afterwards, so two servers on one data dir share a store as they do on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.support.postgres_server import PostgresServer
from sandstream.server.chat.store.database import Database
from sandstream.server.chat.store.migrations import migrate, migrate_postgres
from sandstream.server.chat.store.sql import PostgresChatStore, SqlChatStore, SQLiteChatStore
from sandstream.server.databases.postgres import PostgresDatabase
from sandstream.server.databases.sqlite import SQLiteDatabase

__all__ = [
    "ChatDatabases",
    "current",
    "database_url",
    "one_database",
    "open_database",
    "open_store",
    "use",
]


class ChatDatabases:
    """The databases of one test: PostgreSQL's, by data dir (``server`` None: SQLite)."""

    def __init__(self, server: PostgresServer | None) -> None:
        self.server = server
        self.urls: dict[Path, str] = {}

    @property
    def name(self) -> str:
        return "sqlite" if self.server is None else "postgresql"

    def url(self, data_dir: Path) -> str | None:
        """The PostgreSQL URL of ``data_dir``'s store (None on SQLite)."""
        if self.server is None:
            return None
        key = data_dir.resolve()
        if key not in self.urls:
            self.urls[key] = self.server.create_database()
        return self.urls[key]

    def drop_all(self) -> None:
        if self.server is not None:
            for url in set(self.urls.values()):
                self.server.drop_database(url)
        self.urls.clear()


_current = ChatDatabases(None)


def use(databases: ChatDatabases) -> None:
    """Make ``databases`` the ones the harnesses open (the ``chat_database`` fixture)."""
    global _current
    _current = databases


@contextmanager
def one_database(server: PostgresServer, *data_dirs: Path) -> Iterator[None]:
    """The stores of ``data_dirs`` are one PostgreSQL database of ``server``: replicas
    of one deployment, each with its own data dir and embedded runner."""
    chosen = ChatDatabases(server)
    url = chosen.url(data_dirs[0])
    assert url is not None
    for data_dir in data_dirs[1:]:
        chosen.urls[data_dir.resolve()] = url
    use(chosen)
    try:
        yield
    finally:
        use(ChatDatabases(None))
        chosen.drop_all()


def current() -> ChatDatabases:
    return _current


def database_url(data_dir: Path) -> str | None:
    """The ``--database-url`` of a ``sandstream serve`` on ``data_dir`` (None: SQLite)."""
    return _current.url(data_dir)


async def open_store(data_dir: Path) -> SqlChatStore:
    """The chat store of ``data_dir`` on this test's database."""
    url = _current.url(data_dir)
    if url is None:
        return await SQLiteChatStore.open(data_dir)
    return await PostgresChatStore.open(url)


async def open_database(path: Path) -> Database:
    """The chat database of the store whose SQLite file would be ``path``, migrated."""
    url = _current.url(path.parent)
    if url is None:
        return await SQLiteDatabase.open(path, migrate=migrate)
    return await PostgresDatabase.open(url, migrate=migrate_postgres)
