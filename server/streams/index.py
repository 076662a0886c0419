"""The streams' index: one small SQLite file of what each stream is, not its data.

``streams.sqlite3`` in the streams directory holds a row per stream (path, content type,
expiry, fork source, closure) and a **checkpoint**: a log position known durable and
the producer states and ``Stream-Seq`` as of that position. The data is in the
segment logs (:mod:`.segments`); after a restart each stream replays only its records
after its checkpoint. Creates, deletes and close-only requests commit here before
they are answered (``synchronous=FULL``); checkpoints are written in the background.

Calls raise :class:`sqlite3.Error` when the database fails. Cancellation: a call that
has started runs to completion in its thread (:mod:`sandstream.server.databases.sqlite`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sandstream.server.databases import SQLiteDatabase

from .producers import ProducerState
from .records import ProducerStamp

__all__ = ["INDEX_FILE", "Checkpoint", "StreamIndex", "StreamRow"]

INDEX_FILE: Final = "streams.sqlite3"

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS streams (
        key INTEGER PRIMARY KEY AUTOINCREMENT,
        path TEXT NOT NULL UNIQUE,
        content_type TEXT NOT NULL,
        ttl INTEGER,
        expires_at REAL,
        accessed_at REAL NOT NULL,
        source_key INTEGER REFERENCES streams(key),
        fork_offset INTEGER,
        fork_sub_offset INTEGER NOT NULL DEFAULT 0,
        base INTEGER NOT NULL,
        checkpoint INTEGER NOT NULL,
        start INTEGER NOT NULL,
        stream_seq TEXT,
        closed INTEGER NOT NULL DEFAULT 0,
        closed_by_id TEXT,
        closed_by_epoch INTEGER,
        closed_by_seq INTEGER,
        deleted INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS producers (
        stream_key INTEGER NOT NULL REFERENCES streams(key) ON DELETE CASCADE,
        producer_id TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        PRIMARY KEY (stream_key, producer_id)
    ) WITHOUT ROWID""",
)


def _migrate(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA synchronous = FULL")
    for statement in _SCHEMA:
        conn.execute(statement)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A stream's state as of log position ``position``."""

    position: int
    start: int
    stream_seq: str | None
    closed: bool
    closed_by: ProducerStamp | None
    producers: dict[str, ProducerState]


@dataclass(frozen=True, slots=True)
class StreamRow:
    """A stream's row: its configuration and its checkpoint."""

    key: int
    path: str
    content_type: str
    ttl: int | None
    expires_at: float | None
    accessed_at: float
    source_key: int | None
    fork_offset: int | None
    fork_sub_offset: int
    base: int
    deleted: bool
    checkpoint: Checkpoint


class StreamIndex:
    """The index database (see the module docstring)."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self._db = db

    @classmethod
    async def open(cls, directory: Path) -> StreamIndex:
        """Open (or create) the index in ``directory``."""
        return cls(await SQLiteDatabase.open(directory / INDEX_FILE, migrate=_migrate, readers=1))

    async def close(self) -> None:
        await self._db.close()

    async def rows(self) -> list[StreamRow]:
        """Every stream, sources before their forks."""
        rows: list[StreamRow] = await self._db.read(_all_rows)
        return rows

    async def insert(self, row: StreamRow) -> int:
        """Store a new stream; its key (``row.key`` is ignored)."""

        def insert(conn: sqlite3.Connection) -> int:
            cp = row.checkpoint
            by = cp.closed_by
            cursor = conn.execute(
                "INSERT INTO streams (path, content_type, ttl, expires_at, accessed_at,"
                " source_key, fork_offset, fork_sub_offset, base, checkpoint, start,"
                " stream_seq, closed, closed_by_id, closed_by_epoch, closed_by_seq)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.path,
                    row.content_type,
                    row.ttl,
                    row.expires_at,
                    row.accessed_at,
                    row.source_key,
                    row.fork_offset,
                    row.fork_sub_offset,
                    row.base,
                    cp.position,
                    cp.start,
                    cp.stream_seq,
                    int(cp.closed),
                    by and by.id,
                    by and by.epoch,
                    by and by.seq,
                ),
            )
            key = cursor.lastrowid
            assert key is not None
            return key

        key: int = await self._db.write(insert)
        return key

    async def checkpoint(self, entries: Iterable[tuple[int, float, Checkpoint]]) -> None:
        """Store the checkpoints and access times ``(key, accessed_at, checkpoint)``."""
        batch = list(entries)
        if batch:
            await self._db.write(lambda conn: _store_checkpoints(conn, batch))

    async def mark_deleted(self, key: int) -> None:
        """Soft-delete a stream that forks still read."""
        await self._db.write(
            lambda conn: conn.execute("UPDATE streams SET deleted = 1 WHERE key = ?", (key,))
        )

    async def remove(self, keys: list[int]) -> None:
        """Forget streams (forks before their sources)."""

        def remove(conn: sqlite3.Connection) -> None:
            for key in keys:
                conn.execute("DELETE FROM streams WHERE key = ?", (key,))

        await self._db.write(remove)


def _store_checkpoints(
    conn: sqlite3.Connection, batch: list[tuple[int, float, Checkpoint]]
) -> None:
    for key, accessed_at, cp in batch:
        by = cp.closed_by
        conn.execute(
            "UPDATE streams SET checkpoint = ?, start = ?, stream_seq = ?, closed = ?,"
            " closed_by_id = ?, closed_by_epoch = ?, closed_by_seq = ?, accessed_at = ?"
            " WHERE key = ?",
            (
                cp.position,
                cp.start,
                cp.stream_seq,
                int(cp.closed),
                by and by.id,
                by and by.epoch,
                by and by.seq,
                accessed_at,
                key,
            ),
        )
        conn.executemany(
            "INSERT INTO producers (stream_key, producer_id, epoch, last_seq) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (stream_key, producer_id) DO UPDATE"
            " SET epoch = excluded.epoch, last_seq = excluded.last_seq",
            [(key, pid, state.epoch, state.last_seq) for pid, state in cp.producers.items()],
        )


def _all_rows(conn: sqlite3.Connection) -> list[StreamRow]:
    producers: dict[int, dict[str, ProducerState]] = {}
    for p in conn.execute("SELECT stream_key, producer_id, epoch, last_seq FROM producers"):
        producers.setdefault(p[0], {})[p[1]] = ProducerState(p[2], p[3])
    rows = []
    for r in conn.execute("SELECT * FROM streams ORDER BY key"):
        closed_by = (
            None
            if r["closed_by_id"] is None
            else ProducerStamp(r["closed_by_id"], r["closed_by_epoch"], r["closed_by_seq"])
        )
        rows.append(
            StreamRow(
                key=r["key"],
                path=r["path"],
                content_type=r["content_type"],
                ttl=r["ttl"],
                expires_at=r["expires_at"],
                accessed_at=r["accessed_at"],
                source_key=r["source_key"],
                fork_offset=r["fork_offset"],
                fork_sub_offset=r["fork_sub_offset"],
                base=r["base"],
                deleted=bool(r["deleted"]),
                checkpoint=Checkpoint(
                    r["checkpoint"],
                    r["start"],
                    r["stream_seq"],
                    bool(r["closed"]),
                    closed_by,
                    producers.get(r["key"], {}),
                ),
            )
        )
    return rows
