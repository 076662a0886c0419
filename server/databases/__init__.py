"""The server's databases, driven from worker threads: SQLite (embedded) and PostgreSQL.

:class:`SQLiteDatabase` (:mod:`.sqlite`) and :class:`PostgresDatabase` (:mod:`.postgres`)
run each call in a worker thread, never on the trio event loop; the sessions' and
streams' indexes and the chat store are built on them.
"""

from .postgres import PostgresDatabase
from .sqlite import SQLiteDatabase

__all__ = [
    "PostgresDatabase",
    "SQLiteDatabase",
]
