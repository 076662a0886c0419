"""The server's databases, driven from worker threads: SQLite (embedded) and PostgreSQL.

:class:`SQLiteDatabase` (:mod:`.sqlite`) and :class:`PostgresDatabase` (:mod:`.postgres`)
run each call in a worker thread, never on the trio event loop; the sessions' and
streams' indexes and the chat store are built on them. Each times its calls
(:class:`OperationTimes`, :mod:`.operations`), read for /metrics.
"""

from .operations import OperationsCollector, OperationTimes, operation_families
from .postgres import PostgresDatabase
from .sqlite import SQLiteDatabase

__all__ = [
    "OperationTimes",
    "OperationsCollector",
    "PostgresDatabase",
    "SQLiteDatabase",
    "operation_families",
]
