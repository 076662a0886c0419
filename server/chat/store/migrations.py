"""Versioned schema migrations of the chat store, one list per backend.

Each :class:`Migration` has a version and the statements that take the schema to it;
:data:`MIGRATIONS` are SQLite's, :data:`POSTGRES_MIGRATIONS` PostgreSQL's (a database
that started on PostgreSQL: its version 1 is the schema SQLite reached in five). One
runner serves both: :func:`migrate` applies every version not yet recorded in
``schema_version``, in order, each in its own transaction with its row there, which
starts exclusive (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a transaction-scoped
advisory lock, :func:`migrate_postgres`), so processes opening one database at once
apply each exactly once. Bad input: a database holding a version this code does not
know is refused with :class:`~sandstream.server.chat.model.StoreError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sandstream.server.chat.model import StoreError

from .database import Connection

__all__ = [
    "MIGRATIONS",
    "POSTGRES_MIGRATIONS",
    "Migration",
    "current_version",
    "migrate",
    "migrate_postgres",
]


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


_BACKFILL_REPLAY: Final = """
UPDATE messages SET replay = COALESCE((
    SELECT group_concat(part, char(10, 10)) FROM (
        SELECT 0 AS k, COALESCE(
            (SELECT NULLIF(group_concat(t, char(10, 10)), '') FROM (
                SELECT json_extract(c.value, '$.text') AS t
                FROM json_each(CAST(messages.body AS TEXT), '$.content') AS c
                WHERE json_extract(c.value, '$.type') = 'text' ORDER BY c.key)),
            (SELECT group_concat(e, char(10, 10)) FROM (
                SELECT '[' || json_extract(c.value, '$.code') || '] '
                    || json_extract(c.value, '$.message') AS e
                FROM json_each(CAST(messages.body AS TEXT), '$.content') AS c
                WHERE json_extract(c.value, '$.type') = 'error' ORDER BY c.key))
        ) AS part
        UNION ALL
        SELECT 1, (SELECT '[attached: ' || group_concat(n, ', ') || ']' FROM (
            SELECT json_extract(a.value, '$.name') AS n
            FROM json_each(CAST(messages.body AS TEXT), '$.fileAttachments') AS a
            ORDER BY a.key))
        ORDER BY k)
), '')
"""
"""Version 2's backfill: :func:`sandstream.core.persistence.replay_text`, in SQL."""


def _push_tables(integer: str) -> tuple[str, ...]:
    """The push notification tables, with ``integer`` the 64-bit integer type: the
    devices' subscriptions of a workspace, the pushes waiting out their delay (or sent,
    or dropped) with their fenced claim, and each push's deliveries per subscription."""
    return (
        "CREATE TABLE push_subscriptions ("
        " id TEXT PRIMARY KEY,"
        " workspace_id TEXT NOT NULL,"
        " kind TEXT NOT NULL CHECK (kind IN ('webpush', 'apns', 'fcm')),"
        " address TEXT NOT NULL,"
        " p256dh TEXT,"
        " auth TEXT,"
        f" created_at {integer} NOT NULL,"
        " UNIQUE (workspace_id, kind, address))",
        "CREATE TABLE pending_pushes ("
        " id TEXT PRIMARY KEY,"
        " workspace_id TEXT NOT NULL,"
        " chat_id TEXT NOT NULL,"
        " kind TEXT NOT NULL CHECK (kind IN ('alert', 'dismiss')),"
        " collapse_key TEXT NOT NULL,"
        " title TEXT NOT NULL,"
        " body TEXT NOT NULL,"
        " except_subscription TEXT,"
        f" created_at {integer} NOT NULL,"
        f" seen_at {integer},"
        f" opened_at {integer},"
        " state TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'dropped')),"
        " claim_owner TEXT,"
        f" generation {integer} NOT NULL DEFAULT 0,"
        f" claim_expires_at {integer} NOT NULL DEFAULT 0,"
        f" done_at {integer})",
        "CREATE INDEX pending_pushes_waiting ON pending_pushes (created_at)"
        " WHERE state = 'pending'",
        "CREATE INDEX pending_pushes_chat ON pending_pushes (chat_id)",
        "CREATE TABLE push_deliveries ("
        " push_id TEXT NOT NULL,"
        " subscription_id TEXT NOT NULL,"
        f" sent_at {integer} NOT NULL,"
        " PRIMARY KEY (push_id, subscription_id))",
    )


def _push_retries_and_permissions(integer: str) -> tuple[str, ...]:
    """What a push's later attempts, a permission's alert and its seen marks add, with
    ``integer`` the 64-bit integer type: the turn and permission request an alert is
    about (one alert per request), the attempts made and when the next is due; each
    delivery's state (``sending`` is written before the send: a send whose answer was
    never recorded is not made again); the permission requests a viewer handed out."""
    return (
        "ALTER TABLE pending_pushes ADD COLUMN turn_id TEXT",
        "ALTER TABLE pending_pushes ADD COLUMN permission_id TEXT",
        f"ALTER TABLE pending_pushes ADD COLUMN attempts {integer} NOT NULL DEFAULT 0",
        f"ALTER TABLE pending_pushes ADD COLUMN next_attempt_at {integer} NOT NULL DEFAULT 0",
        "CREATE UNIQUE INDEX pending_pushes_permission ON pending_pushes (turn_id, permission_id)",
        "ALTER TABLE push_deliveries ADD COLUMN state TEXT NOT NULL DEFAULT 'sent'"
        " CHECK (state IN ('sending', 'sent', 'retry', 'failed', 'unknown'))",
        "CREATE TABLE seen_permissions ("
        " turn_id TEXT NOT NULL,"
        " permission_id TEXT NOT NULL,"
        f" seen_at {integer} NOT NULL,"
        " PRIMARY KEY (turn_id, permission_id))",
    )


def _snapshot_tables(integer: str, blob: str, *, rowid: bool) -> tuple[str, ...]:
    """The chats' workspace snapshots, with ``integer`` the 64-bit integer type and
    ``blob`` the bytes type; ``rowid``: add the column that gives their insertion order
    (PostgreSQL; SQLite has its own, which every index holds): per snapshot its chat and
    workspace, the dispatch (and its assistant message) that saved it, its manifest's
    SHA-256 (the same manifest again from one dispatch to one chat is the same snapshot;
    a fork's copy keeps the dispatch, in another chat), its files
    and their bytes; the manifests by SHA-256, each stored once (an unchanged workspace
    adds a row, not a manifest); and per workspace the blobs one of its sandboxes sent
    (a manifest may list only those: holding a hash is no proof of holding the bytes)."""
    return (
        f"CREATE TABLE snapshot_manifests (sha256 TEXT PRIMARY KEY, manifest {blob} NOT NULL)",
        "CREATE TABLE chat_snapshots ("
        + (" rowid BIGINT GENERATED ALWAYS AS IDENTITY," if rowid else "")
        + " id TEXT PRIMARY KEY,"
        " workspace_id TEXT NOT NULL,"
        " chat_id TEXT NOT NULL REFERENCES chats (id),"
        " dispatch_id TEXT NOT NULL REFERENCES sessions (id),"
        " assistant_message_id TEXT,"
        " manifest_sha256 TEXT NOT NULL REFERENCES snapshot_manifests (sha256),"
        f" files {integer} NOT NULL,"
        f" total_bytes {integer} NOT NULL,"
        f" created_at {integer} NOT NULL,"
        " UNIQUE (chat_id, dispatch_id, manifest_sha256))",
        "CREATE INDEX chat_snapshots_by_chat ON chat_snapshots "
        + ("(chat_id, rowid)" if rowid else "(chat_id)"),
        "CREATE INDEX chat_snapshots_by_manifest ON chat_snapshots (manifest_sha256)",
        "CREATE TABLE workspace_blobs ("
        " workspace_id TEXT NOT NULL,"
        " sha256 TEXT NOT NULL,"
        " PRIMARY KEY (workspace_id, sha256))",
    )


def _usage_tables(integer: str) -> tuple[str, ...]:
    """The tokens spent, with ``integer`` the 64-bit integer type: per chat, and per
    workspace and UTC day (``YYYY-MM-DD``), the sums of the settled turns' usage."""
    counts = (
        f" input_tokens {integer} NOT NULL DEFAULT 0,"
        f" output_tokens {integer} NOT NULL DEFAULT 0,"
        f" cached_input_tokens {integer} NOT NULL DEFAULT 0,"
        f" cache_write_tokens {integer} NOT NULL DEFAULT 0,"
        f" model_calls {integer} NOT NULL DEFAULT 0"
    )
    return (
        f"CREATE TABLE chat_usage (chat_id TEXT PRIMARY KEY REFERENCES chats (id),{counts})",
        "CREATE TABLE workspace_usage ("
        " workspace_id TEXT NOT NULL,"
        " day TEXT NOT NULL,"
        f"{counts},"
        " PRIMARY KEY (workspace_id, day))",
    )


def _grant_table(integer: str) -> tuple[str, ...]:
    """Chats' permission grants, with ``integer`` the 64-bit integer type: per grant its
    chat, the tool call's kind and title it answers (once per chat), the assistant
    message whose turn the user answered ``always`` in, and when."""
    return (
        "CREATE TABLE permission_grants ("
        " id TEXT PRIMARY KEY,"
        " chat_id TEXT NOT NULL REFERENCES chats (id),"
        " kind TEXT NOT NULL,"
        " title TEXT NOT NULL,"
        " message_id TEXT NOT NULL,"
        f" created_at {integer} NOT NULL,"
        " UNIQUE (chat_id, kind, title))",
    )


MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(
        1,
        "chats, messages, bag files, sessions, one-time tokens, workflow environments",
        (
            """
            CREATE TABLE chats (
                id TEXT PRIMARY KEY,
                workspace_id TEXT NOT NULL,
                workflow_id TEXT,
                type TEXT NOT NULL DEFAULT 'assistant_sandbox',
                title TEXT,
                conversation_id TEXT,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL,
                deleted_at INTEGER,
                lock_holder TEXT,
                lock_message_id TEXT,
                lock_user_message_id TEXT,
                lock_session_id TEXT,
                lock_expires_at INTEGER
            )
            """,
            "CREATE INDEX chats_by_workspace ON chats (workspace_id, updated_at)",
            """
            CREATE TABLE messages (
                chat_id TEXT NOT NULL REFERENCES chats (id),
                seq INTEGER NOT NULL,
                id TEXT NOT NULL UNIQUE,
                role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
                created_at INTEGER NOT NULL,
                body BLOB NOT NULL,
                PRIMARY KEY (chat_id, seq)
            ) WITHOUT ROWID
            """,
            """
            CREATE TABLE bag_files (
                id TEXT PRIMARY KEY,
                workspace_id TEXT NOT NULL,
                chat_id TEXT REFERENCES chats (id),
                session_id TEXT,
                message_id TEXT,
                name TEXT NOT NULL,
                size INTEGER NOT NULL,
                content_type TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                source TEXT NOT NULL CHECK (source IN ('upload', 'result')),
                created_at INTEGER NOT NULL,
                deleted_at INTEGER
            )
            """,
            "CREATE INDEX bag_files_by_chat ON bag_files (chat_id, created_at)",
            "CREATE INDEX bag_files_by_session ON bag_files (session_id)",
            "CREATE INDEX bag_files_by_sha256 ON bag_files (sha256)",
            """
            CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                kind TEXT NOT NULL CHECK (kind IN ('chat', 'agents')),
                workspace_id TEXT NOT NULL,
                chat_id TEXT REFERENCES chats (id),
                workflow_id TEXT,
                user_message_id TEXT,
                assistant_message_id TEXT,
                prompt TEXT NOT NULL,
                conversation BLOB NOT NULL,
                created_at INTEGER NOT NULL,
                settled_at INTEGER
            )
            """,
            """
            CREATE TABLE tokens (
                hash TEXT PRIMARY KEY,
                purpose TEXT NOT NULL CHECK (purpose IN ('setup', 'run', 'upload')),
                session_id TEXT NOT NULL REFERENCES sessions (id),
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                used_at INTEGER
            )
            """,
            "CREATE INDEX tokens_by_session ON tokens (session_id)",
            """
            CREATE TABLE workflow_environments (
                workspace_id TEXT NOT NULL,
                workflow_id TEXT NOT NULL,
                vars BLOB NOT NULL,
                setup_script TEXT NOT NULL,
                updated_at INTEGER NOT NULL,
                PRIMARY KEY (workspace_id, workflow_id)
            )
            """,
        ),
    ),
    Migration(
        2,
        "messages.replay: the text replay sends, so replay never decodes a message; "
        "an index of locked chats for the lost-turn sweep",
        (
            "ALTER TABLE messages ADD COLUMN replay TEXT NOT NULL DEFAULT ''",
            _BACKFILL_REPLAY,
            "CREATE INDEX chats_locked ON chats (lock_expires_at) WHERE lock_holder IS NOT NULL",
        ),
    ),
    Migration(
        3,
        "the log mover: session leases with fencing generations, the fence each session's "
        "writes are checked against, and the chunks moved from the runners",
        (
            """
            CREATE TABLE leases (
                session_id TEXT PRIMARY KEY,
                owner TEXT,
                generation INTEGER NOT NULL,
                expires_at INTEGER NOT NULL
            ) WITHOUT ROWID
            """,
            """
            CREATE TABLE session_fences (
                session_id TEXT PRIMARY KEY,
                generation INTEGER NOT NULL
            ) WITHOUT ROWID
            """,
            """
            CREATE TABLE moved_chunks (
                session_id TEXT NOT NULL,
                cursor INTEGER NOT NULL,
                chunk BLOB NOT NULL,
                PRIMARY KEY (session_id, cursor)
            ) WITHOUT ROWID
            """,
        ),
    ),
    Migration(
        4,
        "chat_turns: each chat turn's runner session (id, runner URL or NULL when "
        "embedded), assistant message, onDisconnect and state, for resume and settle",
        (
            "CREATE TABLE chat_turns ("
            " id TEXT PRIMARY KEY REFERENCES sessions (id),"
            " chat_id TEXT NOT NULL REFERENCES chats (id),"
            " workspace_id TEXT NOT NULL,"
            " session_id TEXT UNIQUE,"
            " runner_url TEXT,"
            " assistant_message_id TEXT NOT NULL,"
            " user_message_id TEXT NOT NULL,"
            " on_disconnect TEXT NOT NULL CHECK (on_disconnect IN ('continue', 'cancel')),"
            " state TEXT NOT NULL CHECK (state IN ('starting', 'running', 'settled')),"
            " created_at INTEGER NOT NULL,"
            " settled_at INTEGER)",
            "CREATE INDEX chat_turns_live ON chat_turns (chat_id) WHERE state != 'settled'",
        ),
    ),
    Migration(
        5,
        "moved_runs replaces moved_chunks: the log mover stores a batch of consecutive "
        "chunks as one row (first and last cursor, the chunks concatenated), not a row "
        "per chunk",
        (
            """
            CREATE TABLE moved_runs (
                session_id TEXT NOT NULL,
                first_cursor INTEGER NOT NULL,
                last_cursor INTEGER NOT NULL,
                chunks BLOB NOT NULL,
                PRIMARY KEY (session_id, first_cursor)
            )
            """,
            "INSERT INTO moved_runs (session_id, first_cursor, last_cursor, chunks)"
            " SELECT session_id, cursor, cursor, chunk FROM moved_chunks",
            "DROP TABLE moved_chunks",
        ),
    ),
    Migration(
        6,
        "tokens.redeemed_with: the idempotency key a token was redeemed with, so a "
        "retried callback carrying it is answered again",
        ("ALTER TABLE tokens ADD COLUMN redeemed_with TEXT",),
    ),
    Migration(
        7,
        "push notifications: push_subscriptions, pending_pushes, push_deliveries",
        _push_tables("INTEGER"),
    ),
    Migration(
        8,
        "push notifications: later attempts, at most one send per device, the alerts of "
        "permission requests and seen_permissions",
        _push_retries_and_permissions("INTEGER"),
    ),
    Migration(
        9,
        "chat_snapshots: each chat's workspace snapshots, the newest kept; snapshot_manifests; "
        "workspace_blobs",
        _snapshot_tables("INTEGER", "BLOB", rowid=False),
    ),
    Migration(
        10,
        "permission_grants: the always answers a chat keeps for its next turns",
        _grant_table("INTEGER"),
    ),
    Migration(
        11,
        "chat_usage and workspace_usage: the tokens each chat, and each workspace per UTC "
        "day, spent",
        _usage_tables("INTEGER"),
    ),
)


POSTGRES_MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(
        1,
        "the chat schema (SQLite's versions 1 to 6) and bag_blobs, the chat bag's bytes "
        "by SHA-256; rowid: a row's insertion order, as SQLite's",
        (
            """
            CREATE TABLE chats (
                id TEXT PRIMARY KEY,
                workspace_id TEXT NOT NULL,
                workflow_id TEXT,
                type TEXT NOT NULL DEFAULT 'assistant_sandbox',
                title TEXT,
                conversation_id TEXT,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                deleted_at BIGINT,
                lock_holder TEXT,
                lock_message_id TEXT,
                lock_user_message_id TEXT,
                lock_session_id TEXT,
                lock_expires_at BIGINT
            )
            """,
            "CREATE INDEX chats_by_workspace ON chats (workspace_id, updated_at)",
            "CREATE INDEX chats_locked ON chats (lock_expires_at) WHERE lock_holder IS NOT NULL",
            """
            CREATE TABLE messages (
                chat_id TEXT NOT NULL REFERENCES chats (id),
                seq BIGINT NOT NULL,
                id TEXT NOT NULL UNIQUE,
                role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
                created_at BIGINT NOT NULL,
                body BYTEA NOT NULL,
                replay TEXT NOT NULL DEFAULT '',
                PRIMARY KEY (chat_id, seq)
            )
            """,
            """
            CREATE TABLE bag_blobs (
                sha256 TEXT PRIMARY KEY,
                data BYTEA NOT NULL
            )
            """,
            """
            CREATE TABLE bag_files (
                rowid BIGINT GENERATED ALWAYS AS IDENTITY,
                id TEXT PRIMARY KEY,
                workspace_id TEXT NOT NULL,
                chat_id TEXT REFERENCES chats (id),
                session_id TEXT,
                message_id TEXT,
                name TEXT NOT NULL,
                size BIGINT NOT NULL,
                content_type TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                source TEXT NOT NULL CHECK (source IN ('upload', 'result')),
                created_at BIGINT NOT NULL,
                deleted_at BIGINT
            )
            """,
            "CREATE INDEX bag_files_by_chat ON bag_files (chat_id, created_at)",
            "CREATE INDEX bag_files_by_session ON bag_files (session_id)",
            "CREATE INDEX bag_files_by_sha256 ON bag_files (sha256)",
            """
            CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                kind TEXT NOT NULL CHECK (kind IN ('chat', 'agents')),
                workspace_id TEXT NOT NULL,
                chat_id TEXT REFERENCES chats (id),
                workflow_id TEXT,
                user_message_id TEXT,
                assistant_message_id TEXT,
                prompt TEXT NOT NULL,
                conversation BYTEA NOT NULL,
                created_at BIGINT NOT NULL,
                settled_at BIGINT
            )
            """,
            """
            CREATE TABLE tokens (
                hash TEXT PRIMARY KEY,
                purpose TEXT NOT NULL CHECK (purpose IN ('setup', 'run', 'upload')),
                session_id TEXT NOT NULL REFERENCES sessions (id),
                created_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                used_at BIGINT,
                redeemed_with TEXT
            )
            """,
            "CREATE INDEX tokens_by_session ON tokens (session_id)",
            """
            CREATE TABLE workflow_environments (
                workspace_id TEXT NOT NULL,
                workflow_id TEXT NOT NULL,
                vars BYTEA NOT NULL,
                setup_script TEXT NOT NULL,
                updated_at BIGINT NOT NULL,
                PRIMARY KEY (workspace_id, workflow_id)
            )
            """,
            """
            CREATE TABLE leases (
                session_id TEXT PRIMARY KEY,
                owner TEXT,
                generation BIGINT NOT NULL,
                expires_at BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE session_fences (
                session_id TEXT PRIMARY KEY,
                generation BIGINT NOT NULL
            )
            """,
            "CREATE TABLE chat_turns ("
            " rowid BIGINT GENERATED ALWAYS AS IDENTITY,"
            " id TEXT PRIMARY KEY REFERENCES sessions (id),"
            " chat_id TEXT NOT NULL REFERENCES chats (id),"
            " workspace_id TEXT NOT NULL,"
            " session_id TEXT UNIQUE,"
            " runner_url TEXT,"
            " assistant_message_id TEXT NOT NULL,"
            " user_message_id TEXT NOT NULL,"
            " on_disconnect TEXT NOT NULL CHECK (on_disconnect IN ('continue', 'cancel')),"
            " state TEXT NOT NULL CHECK (state IN ('starting', 'running', 'settled')),"
            " created_at BIGINT NOT NULL,"
            " settled_at BIGINT)",
            "CREATE INDEX chat_turns_live ON chat_turns (chat_id) WHERE state != 'settled'",
            """
            CREATE TABLE moved_runs (
                session_id TEXT NOT NULL,
                first_cursor BIGINT NOT NULL,
                last_cursor BIGINT NOT NULL,
                chunks BYTEA NOT NULL,
                PRIMARY KEY (session_id, first_cursor)
            )
            """,
        ),
    ),
    Migration(
        2,
        "push notifications: push_subscriptions, pending_pushes, push_deliveries",
        _push_tables("BIGINT"),
    ),
    Migration(
        3,
        "push notifications: later attempts, at most one send per device, the alerts of "
        "permission requests and seen_permissions",
        _push_retries_and_permissions("BIGINT"),
    ),
    Migration(
        4,
        "chat_snapshots: each chat's workspace snapshots, the newest kept; snapshot_manifests; "
        "workspace_blobs",
        _snapshot_tables("BIGINT", "BYTEA", rowid=True),
    ),
    Migration(
        5,
        "permission_grants: the always answers a chat keeps for its next turns",
        _grant_table("BIGINT"),
    ),
    Migration(
        6,
        "chat_usage and workspace_usage: the tokens each chat, and each workspace per UTC "
        "day, spent",
        _usage_tables("BIGINT"),
    ),
)

_MIGRATION_LOCK: Final = 0x73616E6473747265  # "sandstre": the advisory lock's key
"""The PostgreSQL advisory lock a migration transaction holds (one at a time)."""


def _begin_immediate(conn: Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")


def _begin_locked(conn: Connection) -> None:
    conn.execute("BEGIN")
    conn.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))


def migrate_postgres(conn: Connection) -> list[int]:
    """:func:`migrate` with :data:`POSTGRES_MIGRATIONS`, each migration's transaction
    holding an advisory lock (replicas starting at once wait for each other)."""
    return migrate(conn, POSTGRES_MIGRATIONS, begin=_begin_locked)


def _ensure_version_table(conn: Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at BIGINT NOT NULL)"
    )


def current_version(conn: Connection) -> int:
    """The highest migration applied (0 for a new database)."""
    _ensure_version_table(conn)
    row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    return int(row[0])


def migrate(
    conn: Connection,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    *,
    begin: Callable[[Connection], None] = _begin_immediate,
) -> list[int]:
    """Apply the missing migrations; return the versions applied (often none).

    ``conn`` must be in autocommit mode (SQLite: ``isolation_level=None``); ``begin``
    starts each migration's exclusive transaction. Raises :class:`StoreError` if the
    database is newer than ``migrations``.
    """
    latest = migrations[-1].version if migrations else 0
    applied: list[int] = []
    for migration in migrations:
        begin(conn)
        try:
            version = current_version(conn)
            if version > latest:
                raise StoreError(
                    f"the database has schema version {version}, newer than this "
                    f"sandstream ({latest}); upgrade sandstream"
                )
            if migration.version <= version:
                conn.execute("COMMIT")
                continue
            if migration.version != version + 1:
                raise StoreError(f"migration {migration.version} follows {version}: a gap")
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.description, int(time.time() * 1000)),
            )
            conn.execute("COMMIT")
            applied.append(migration.version)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    if not migrations:
        return applied
    final = current_version(conn)
    if final > latest:
        raise StoreError(
            f"the database has schema version {final}, newer than this sandstream "
            f"({latest}); upgrade sandstream"
        )
    return applied
