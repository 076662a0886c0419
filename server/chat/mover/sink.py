"""Where the log mover puts a session's chunks: the chat database, fenced, idempotent.

:class:`MovedChunks` keeps ``moved_chunks (session_id, cursor, chunk)`` and, per
session, ``session_fences.generation``: the highest lease generation that has written
(or claimed, :meth:`MovedChunks.fence`). :meth:`MovedChunks.move` is one transaction:

1. refuse with :class:`FencedError` if the writer's generation is below the fence
   (a newer owner has claimed the session: this one lost its lease);
2. refuse with :class:`ChunkGapError` if the batch would leave a hole after the
   chunks already stored (cursors are dense: none may be lost);
3. raise the fence to the writer's generation and ``INSERT OR IGNORE`` the chunks, so
   a chunk moved twice (a takeover resumes from the stored cursor) is stored once.

Cancellation: a transaction that started completes (:mod:`sandstream.server.sqlite`);
the caller does not learn its outcome, which a retry from :meth:`last_cursor` makes
harmless.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from sandstream.server.sqlite import SQLiteDatabase

__all__ = ["Batch", "ChunkGapError", "FencedError", "MovedChunks", "check_fence"]

Batch = Sequence[tuple[int, bytes]]
"""Chunks with their cursors, in cursor order, consecutive: ``[(7, b"…\\n"), (8, …)]``."""


class FencedError(Exception):
    """A write under ``generation`` was refused: ``fence``, a newer generation, owns
    the session now. Nothing of the batch was written."""

    def __init__(self, session_id: str, generation: int, fence: int) -> None:
        super().__init__(
            f"session {session_id}: generation {generation} is fenced off by generation {fence}"
        )
        self.session_id = session_id
        self.generation = generation
        self.fence = fence


class ChunkGapError(ValueError):
    """A batch does not follow the stored chunks (its first cursor is past the last
    stored one + 1) or is not consecutive. Nothing of it was written."""


def _check_batch(session_id: str, batch: Batch) -> None:
    first = batch[0][0]
    for offset, (cursor, chunk) in enumerate(batch):
        if cursor != first + offset:
            raise ChunkGapError(f"session {session_id}: cursor {cursor} after {first + offset - 1}")
        if not isinstance(chunk, bytes):
            raise TypeError(f"a chunk must be bytes, not {type(chunk).__name__}")
    if first < 1:
        raise ChunkGapError(f"session {session_id}: cursors start at 1, got {first}")


def check_fence(conn: sqlite3.Connection, session_id: str, generation: int) -> int:
    """In the caller's transaction: the session's fence (0: none); raises
    :class:`FencedError` if it is above ``generation`` (a write the chat makes under
    the lease, such as settling the turn, checks it in its own transaction)."""
    row = conn.execute(
        "SELECT generation FROM session_fences WHERE session_id = ?", (session_id,)
    ).fetchone()
    fence = 0 if row is None else int(row[0])
    if fence > generation:
        raise FencedError(session_id, generation, fence)
    return fence


def _raise_fence(conn: sqlite3.Connection, session_id: str, generation: int) -> None:
    if check_fence(conn, session_id, generation) < generation:
        conn.execute(
            "INSERT INTO session_fences (session_id, generation) VALUES (?, ?) "
            "ON CONFLICT (session_id) DO UPDATE SET generation = excluded.generation",
            (session_id, generation),
        )


def _last_cursor(conn: sqlite3.Connection, session_id: str) -> int:
    row = conn.execute(
        "SELECT MAX(cursor) FROM moved_chunks WHERE session_id = ?", (session_id,)
    ).fetchone()
    return int(row[0] or 0)


class MovedChunks:
    """The moved chunks and the fences, in the chat database (migration 3)."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self.db = db

    async def fence(self, session_id: str, generation: int) -> None:
        """Raise the session's fence to ``generation`` (a new owner does it as it claims,
        so the previous owner's next write is refused even before this one writes).
        Raises :class:`FencedError` if a newer generation is there already."""
        await self.db.write(lambda conn: _raise_fence(conn, session_id, generation))

    async def move(self, session_id: str, generation: int, batch: Batch) -> None:
        """Store ``batch`` under ``generation``, in one transaction (see the module
        docstring). Raises :class:`FencedError`, :class:`ChunkGapError`; an empty
        batch checks the fence only."""
        if batch:
            _check_batch(session_id, batch)

        def run(conn: sqlite3.Connection) -> None:
            _raise_fence(conn, session_id, generation)
            if not batch:
                return
            last = _last_cursor(conn, session_id)
            if batch[0][0] > last + 1:
                raise ChunkGapError(
                    f"session {session_id}: the batch starts at cursor {batch[0][0]}, "
                    f"the stored chunks end at {last}"
                )
            conn.executemany(
                "INSERT OR IGNORE INTO moved_chunks (session_id, cursor, chunk) VALUES (?, ?, ?)",
                [(session_id, cursor, chunk) for cursor, chunk in batch if cursor > last],
            )

        await self.db.write(run)

    async def read(self, session_id: str) -> list[bytes]:
        """Every stored chunk of the session, in cursor order."""

        def run(conn: sqlite3.Connection) -> list[bytes]:
            rows = conn.execute(
                "SELECT chunk FROM moved_chunks WHERE session_id = ? ORDER BY cursor",
                (session_id,),
            )
            return [bytes(row[0]) for row in rows]

        return await self.db.read(run)

    async def last_cursor(self, session_id: str) -> int:
        """The cursor of the newest stored chunk (0: none)."""
        return await self.db.read(lambda conn: _last_cursor(conn, session_id))

    async def last_chunk(self, session_id: str) -> tuple[int, bytes] | None:
        """The newest stored chunk with its cursor, or None."""

        def run(conn: sqlite3.Connection) -> tuple[int, bytes] | None:
            row = conn.execute(
                "SELECT cursor, chunk FROM moved_chunks WHERE session_id = ? "
                "ORDER BY cursor DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            return None if row is None else (int(row[0]), bytes(row[1]))

        return await self.db.read(run)

    async def generation(self, session_id: str) -> int:
        """The session's fence: the newest generation that claimed or wrote (0: none)."""

        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT generation FROM session_fences WHERE session_id = ?", (session_id,)
            ).fetchone()
            return 0 if row is None else int(row[0])

        return await self.db.read(run)
