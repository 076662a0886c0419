"""Fixtures for the chat backend tests: a real chat server with the embedded runner,
the store's database (SQLite, or a real PostgreSQL server: :mod:`.databases`), and a
throwaway TLS CA."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from benchmarks.support.redis_server import TlsFiles, make_tls_files
from sandstream.server.chat.store.database import Database
from tests.chat import databases
from tests.chat.harness import ChatServer, plans, sleeping, start_chat_server
from tests.chat.mover_harness import open_chat_db


@pytest.fixture(params=["sqlite", "postgresql"])
def chat_database(request: pytest.FixtureRequest) -> Iterator[databases.ChatDatabases]:
    """The store's database for this test: the harnesses open theirs on it."""
    server = request.getfixturevalue("postgres_server") if request.param == "postgresql" else None
    chosen = databases.ChatDatabases(server)
    databases.use(chosen)
    try:
        yield chosen
    finally:
        databases.use(databases.ChatDatabases(None))
        chosen.drop_all()


@pytest.fixture
async def server(
    nursery: trio.Nursery, tmp_path: Path, chat_database: databases.ChatDatabases
) -> ChatServer:
    """A chat server (embedded runner), on each database. Prompts starting with
    ``slow`` sleep 300 s in a tool, ``nap`` 1.5 s; any other prompt is answered
    "Done: {prompt}" at once."""
    agent = plans(slow=sleeping(300), nap=sleeping(1.5))
    return await start_chat_server(nursery, tmp_path / "data", agent=agent)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated chat database (the log mover's tables), on this test's database."""
    database = await open_chat_db(tmp_path / "chat.sqlite3")
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A throwaway CA and certificates it signed for 127.0.0.1, for the session."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def localhost_tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A throwaway CA and certificates it signed for 127.0.0.1 and ``localhost``."""
    return make_tls_files(tmp_path_factory.mktemp("tls"), host_names=("localhost",))
