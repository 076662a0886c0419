"""The chat database, every table and its SQL: the store's contract (:mod:`.contract`),
its one implementation (:mod:`.sql`, a module per concern) on SQLite or PostgreSQL
through what its SQL needs of a database (:mod:`.database`), versioned migrations
(:mod:`.migrations`), the log mover's tables (:mod:`.moved_runs`, :mod:`.leases`) and
the bag's blobs (:mod:`.bag`), which failures are transient (:mod:`.faults`). The store
imports no mover."""

from .bag import BlobStore, content_type_for, sanitize_name
from .contract import (
    ChatMessageStore,
    ChatStore,
    DispatchStore,
    EnvironmentStore,
    ForkStore,
    GrantStore,
    LogMoverTables,
    PushAlertStore,
    PushOutboxStore,
    SnapshotStore,
    TurnStore,
    UsageStore,
)
from .database import Database
from .faults import TRANSIENT_TYPES, Backoff, is_transient, report_failure, retry_transient
from .leases import DatabaseLease, ttl_ms
from .moved_runs import Batch, MovedChunks
from .sql import PostgresChatStore, SqlChatStore, SQLiteChatStore, stored_manifest, utc_day

__all__: list[str] = [
    "TRANSIENT_TYPES",
    "Backoff",
    "Batch",
    "BlobStore",
    "ChatMessageStore",
    "ChatStore",
    "Database",
    "DatabaseLease",
    "DispatchStore",
    "EnvironmentStore",
    "ForkStore",
    "GrantStore",
    "LogMoverTables",
    "MovedChunks",
    "PostgresChatStore",
    "PushAlertStore",
    "PushOutboxStore",
    "SQLiteChatStore",
    "SnapshotStore",
    "SqlChatStore",
    "TurnStore",
    "UsageStore",
    "content_type_for",
    "is_transient",
    "report_failure",
    "retry_transient",
    "sanitize_name",
    "stored_manifest",
    "ttl_ms",
    "utc_day",
]
