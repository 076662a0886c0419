"""The chat database's fences and moved runs: what the log mover writes, fenced,
idempotent.

:class:`MovedChunks` keeps each session's fence, ``session_fences.generation``: the
newest lease generation that claimed or wrote. With the mover's ``keep_chunks`` it also
keeps a copy of the session's chunks in ``moved_runs``, a row per moved :class:`Batch`
(consecutive whole lines, concatenated).

Cancellation: a transaction that started completes (:mod:`sandstream.server.databases.sqlite`);
the caller does not learn its outcome, which a retry from :meth:`~MovedChunks.last_cursor`
makes harmless.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sandstream.server.chat.model import ChunkGapError, ChunkShapeError, FencedError
from sandstream.server.sessions import split_chunks

from .database import Connection, Database

T = TypeVar("T")

__all__ = [
    "Batch",
    "MovedChunks",
    "check_fence",
]


@dataclass(frozen=True, slots=True)
class Batch:
    """Consecutive chunks of one session as one run: the cursor of the first, and
    ``data``, ``count`` whole lines (each chunk one ``\\n``-terminated line).
    ``Batch.of(7, [b"…\\n", b"…\\n"])`` holds cursors 7 and 8."""

    first: int
    data: bytes
    count: int

    @classmethod
    def of(cls, first: int, chunks: Sequence[bytes]) -> Batch:
        """The batch of ``chunks`` from cursor ``first``. Raises :class:`TypeError`
        for a chunk that is not bytes."""
        return cls(first, b"".join(chunks), len(chunks))

    @property
    def last(self) -> int:
        """The cursor of the last chunk (``first - 1`` when there is none)."""
        return self.first + self.count - 1


def _check_batch(session_id: str, batch: Batch) -> None:
    """Raise :class:`ChunkGapError`, :class:`ChunkShapeError` for a batch that cannot
    be stored (in C: no Python step per chunk)."""
    if batch.first < 1:
        raise ChunkGapError(f"session {session_id}: cursors start at 1, got {batch.first}")
    data = batch.data
    if type(data) is not bytes:
        raise ChunkShapeError(f"session {session_id}: a batch's data must be bytes")
    if data.count(b"\n") != batch.count or (data and not data.endswith(b"\n")):
        raise ChunkShapeError(
            f"session {session_id}: the chunks after cursor {batch.first - 1} are not "
            f"{batch.count} whole lines"
        )


def check_fence(conn: Connection, session_id: str, generation: int) -> int:
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


def _raise_fence(conn: Connection, session_id: str, generation: int) -> int:
    """Raise the fence to ``generation``; the fence before (0: none)."""
    fence = check_fence(conn, session_id, generation)
    if fence < generation:
        conn.execute(
            "INSERT INTO session_fences (session_id, generation) VALUES (?, ?) "
            "ON CONFLICT (session_id) DO UPDATE SET generation = excluded.generation",
            (session_id, generation),
        )
    return fence


def _insert_run(conn: Connection, session_id: str, first: int, last: int, data: bytes) -> None:
    conn.execute(
        "INSERT INTO moved_runs (session_id, first_cursor, last_cursor, chunks) "
        "VALUES (?, ?, ?, ?)",
        (session_id, first, last, data),
    )


def _last_cursor(conn: Connection, session_id: str) -> int:
    row = conn.execute(
        "SELECT last_cursor FROM moved_runs WHERE session_id = ? "
        "ORDER BY first_cursor DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    return 0 if row is None else int(row[0])


def _after(batch: Batch, last: int) -> Batch:
    """The part of ``batch`` after cursor ``last`` (itself when that is all of it)."""
    if last < batch.first:
        return batch
    data, start = batch.data, 0
    for _ in range(last - batch.first + 1):
        start = data.index(b"\n", start) + 1
    return Batch(last + 1, data[start:], batch.last - last)


class MovedChunks:
    """The moved chunks and the fences, in the chat database (``moved_runs`` and
    ``session_fences``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def fence(self, session_id: str, generation: int) -> int:
        """Raise the session's fence to ``generation`` (a new owner does it as it claims,
        so the previous owner's next write is refused even before this one writes);
        returns the fence before (0: none). Raises :class:`FencedError` if a newer
        generation is there already."""
        return await self.db.write(lambda conn: _raise_fence(conn, session_id, generation))

    async def move(self, session_id: str, generation: int, batch: Batch) -> None:
        """Store ``batch`` under ``generation``, in one transaction: refused with
        :class:`FencedError` (nothing written) below the session's fence, with
        :class:`ChunkGapError` if it would leave a hole after the stored chunks, with
        :class:`ChunkShapeError` if its data is not its count of whole lines; else the
        fence is raised to ``generation`` and the chunks past the last stored cursor
        are stored, so a chunk moved twice is stored once. A batch without chunks
        checks the fence only."""
        _check_batch(session_id, batch)

        def run(conn: Connection) -> None:
            _raise_fence(conn, session_id, generation)
            if not batch.count:
                return
            last = _last_cursor(conn, session_id)
            if batch.first > last + 1:
                raise ChunkGapError(
                    f"session {session_id}: the batch starts at cursor {batch.first}, "
                    f"the stored chunks end at {last}"
                )
            if batch.last <= last:
                return  # all of it moved before
            rest = _after(batch, last)
            _insert_run(conn, session_id, rest.first, rest.last, rest.data)

        await self.db.write(run)

    async def fold(self, session_id: str, fold: Callable[[Iterable[bytes]], T]) -> T:
        """``fold(runs)`` over the session's stored chunks in cursor order, in a worker
        thread: ``runs`` yields them as stored, each one or more whole lines, read one
        at a time (memory holds a run, not the session). Cancellation: the fold runs to
        its end in its thread; the caller does not learn its result."""

        def runs(conn: Connection) -> Iterator[bytes]:
            # A run per query (by key, in the read's snapshot): a result is read
            # whole by psycopg, lazily by sqlite3, so this bounds memory on both.
            after = 0
            while True:
                row = conn.execute(
                    "SELECT first_cursor, chunks FROM moved_runs WHERE session_id = ? "
                    "AND first_cursor > ? ORDER BY first_cursor LIMIT 1",
                    (session_id, after),
                ).fetchone()
                if row is None:
                    return
                after = int(row[0])
                yield row[1]

        return await self.db.read(lambda conn: fold(runs(conn)))

    async def read(self, session_id: str) -> list[bytes]:
        """Every stored chunk of the session, in cursor order."""
        return await self.fold(session_id, lambda runs: [c for r in runs for c in split_chunks(r)])

    async def last_cursor(self, session_id: str) -> int:
        """The cursor of the newest stored chunk (0: none)."""
        return await self.db.read(lambda conn: _last_cursor(conn, session_id))

    async def last_chunk(self, session_id: str) -> tuple[int, bytes] | None:
        """The newest stored chunk with its cursor, or None."""

        def run(conn: Connection) -> tuple[int, bytes] | None:
            row = conn.execute(
                "SELECT last_cursor, chunks FROM moved_runs WHERE session_id = ? "
                "ORDER BY first_cursor DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            data = bytes(row[1])
            return int(row[0]), data[data.rfind(b"\n", 0, -1) + 1 :]

        return await self.db.read(run)

    async def generation(self, session_id: str) -> int:
        """The session's fence: the newest generation that claimed or wrote (0: none)."""

        def run(conn: Connection) -> int:
            row = conn.execute(
                "SELECT generation FROM session_fences WHERE session_id = ?", (session_id,)
            ).fetchone()
            return 0 if row is None else int(row[0])

        return await self.db.read(run)
