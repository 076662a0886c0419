"""What PostgreSQL makes new for the chat store: replicas (stores of their own) on one
database racing for a chat's lock and a token, replicas migrating one new database at
once, a connection lost mid-transaction, and a database ``sandstream serve`` cannot use
at start-up. A real PostgreSQL server (:mod:`benchmarks.support.postgres_server`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psycopg
import pytest
import trio

from benchmarks.support.postgres_server import PostgresServer
from sandstream.server.chat import ChatBusyError, PostgresChatStore, TokenRejectedError
from sandstream.server.chat.model.ids import now_ms
from sandstream.server.chat.store.database import Connection
from sandstream.server.chat.store.migrations import POSTGRES_MIGRATIONS, migrate_postgres
from sandstream.server.databases.postgres import PostgresDatabase
from tests.chat.test_store import WS, _finish, _request

REPLICAS = 2
ATTEMPTS = 8
"""Turns each replica tries to begin at once on the same chat."""


@pytest.fixture
def database_url(postgres_server: PostgresServer) -> Iterator[str]:
    url = postgres_server.create_database()
    yield url
    postgres_server.drop_database(url)


async def _replicas(url: str) -> list[PostgresChatStore]:
    return [await PostgresChatStore.open(url) for _ in range(REPLICAS)]


async def test_replicas_racing_for_a_chat_one_takes_its_lock(database_url: str) -> None:
    replicas = await _replicas(database_url)
    try:
        first = _request(None)
        start = await replicas[0].begin_turn(first)
        await replicas[0].finish_turn(_finish(start.chat.id, first))
        winners: list[str] = []
        busy: list[ChatBusyError] = []

        async def attempt(replica: PostgresChatStore) -> None:
            req = _request(start.chat.id)
            try:
                await replica.begin_turn(req)
                winners.append(req.assistant_message_id)
            except ChatBusyError as exc:  # the API's 409
                busy.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(ATTEMPTS):
                for replica in replicas:
                    nursery.start_soon(attempt, replica)
        assert len(winners) == 1 and len(busy) == ATTEMPTS * REPLICAS - 1
        assert {exc.active_message_id for exc in busy} == set(winners)
        messages = await replicas[1].get_messages(WS, start.chat.id)
        assert len(messages) == 3  # the first exchange and the winner's user message
    finally:
        for replica in replicas:
            await replica.close()


async def test_replicas_redeeming_one_token_one_succeeds(database_url: str) -> None:
    replicas = await _replicas(database_url)
    try:
        req = _request(None)
        await replicas[0].begin_turn(req)
        setup = next(t for t in req.tokens if t.purpose == "setup")
        redeemed: list[str] = []
        refused: list[str] = []

        async def redeem(replica: PostgresChatStore) -> None:
            try:
                await replica.consume_token(
                    setup.hash, purpose="setup", session_id=req.session_id, now=now_ms()
                )
                redeemed.append("ok")
            except TokenRejectedError:
                refused.append("refused")

        async with trio.open_nursery() as nursery:
            for _ in range(ATTEMPTS):
                for replica in replicas:
                    nursery.start_soon(redeem, replica)
        assert len(redeemed) == 1 and len(refused) == ATTEMPTS * REPLICAS - 1
    finally:
        for replica in replicas:
            await replica.close()


async def test_replicas_starting_at_once_migrate_a_new_database_once(database_url: str) -> None:
    opened: list[PostgresChatStore] = []

    async def start() -> None:
        opened.append(await PostgresChatStore.open(database_url))

    async with trio.open_nursery() as nursery:
        for _ in range(6):
            nursery.start_soon(start)
    try:
        with psycopg.connect(database_url) as conn:
            versions = conn.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()
        assert [v for (v,) in versions] == [m.version for m in POSTGRES_MIGRATIONS]
        chat = await opened[0].create_chat(workspace_id=WS, workflow_id=None, title="t", now=1)
        assert [c.id for c in await opened[-1].list_chats(WS, limit=5, now=2)] == [chat.id]
    finally:
        for store in opened:
            await store.close()


async def test_a_connection_lost_mid_transaction_writes_nothing(
    database_url: str, postgres_server: PostgresServer
) -> None:
    store = await PostgresChatStore.open(database_url)
    try:

        def half_then_lost(conn: Connection) -> None:
            conn.execute(
                "INSERT INTO chats (id, workspace_id, created_at, updated_at) "
                "VALUES ('chat_half', ?, 0, 0)",
                (WS,),
            )
            assert postgres_server.terminate_connections(database_url) >= 1
            conn.execute("UPDATE chats SET title = 'never' WHERE id = 'chat_half'")

        with pytest.raises(psycopg.OperationalError):
            await store.db.write(half_then_lost)
        assert await store.list_chats(WS, limit=5, now=0) == []  # a new connection
        chat = await store.create_chat(workspace_id=WS, workflow_id=None, title=None, now=1)
        assert [c.id for c in await store.list_chats(WS, limit=5, now=2)] == [chat.id]
        # Idle connections that died (a server restart) are replaced, not failed.
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(partial(store.list_chats, WS, limit=5, now=3))
        assert postgres_server.terminate_connections(database_url) >= 1
        assert [c.id for c in await store.list_chats(WS, limit=5, now=4)] == [chat.id]
    finally:
        await store.close()


async def test_a_write_waiting_for_a_row_lock_held_elsewhere_fails_after_the_lock_timeout(
    database_url: str,
) -> None:
    """A session stuck inside a transaction holding a row lock (another replica) makes
    a write that needs the row fail with a clear error after the lock timeout, not wait
    forever; once it lets go, the write goes through."""
    db = await PostgresDatabase.open(database_url, migrate=migrate_postgres, lock_timeout_ms=200)
    try:
        await db.write(
            lambda conn: conn.execute(
                "INSERT INTO leases (session_id, owner, generation, expires_at) "
                "VALUES ('ses_locked', 'a', 1, 0)"
            )
        )
        row = await db.read(
            lambda conn: conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        )
        assert row is not None
        settings = row[0]
        assert settings == "1min"

        def renew(conn: Connection) -> int:
            cursor = conn.execute(
                "UPDATE leases SET expires_at = 1 WHERE session_id = 'ses_locked'"
            )
            return cursor.rowcount

        with psycopg.connect(database_url) as other:  # a transaction, left open
            other.execute("SELECT * FROM leases WHERE session_id = 'ses_locked' FOR UPDATE")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                await db.write(renew)
        assert await db.write(renew) == 1
    finally:
        await db.close()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("mysql://localhost/chat", "must be a postgresql:// URL"),
        ("postgresql://localhost/chat?nonsense=1", "--database-url is malformed"),
        ("postgresql://127.0.0.1:99999/x", "invalid port number"),
        ("postgresql://sandstream@127.0.0.1:{closed}/nowhere", "the database cannot be used"),
    ],
)
async def test_a_database_serve_cannot_use_is_one_line_and_exit_2(
    tmp_path: Path, url: str, why: str
) -> None:
    with trio.socket.socket() as closed:  # a port nobody listens on
        await closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDSTREAM_")}
    argv = [str(Path(sys.executable).parent / "sandstream"), "serve", "--port", "0"]
    argv += ["--data-dir", str(tmp_path), "--public-url", "http://127.0.0.1:9"]
    argv += ["--database-url", url.format(closed=port)]
    result = await trio.run_process(
        argv, capture_stdout=True, capture_stderr=True, env=env, check=False
    )
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sandstream serve: ") and why in lines[0]
    assert b"listening" not in result.stdout
