"""The chat database's moved runs: where the log mover puts a session's chunks, fenced,
idempotent.

:class:`MovedChunks` keeps a session's chunks in ``moved_runs``, a row per moved batch
(consecutive whole lines, concatenated), and its fence, ``session_fences.generation``:
the newest lease generation that claimed or wrote. A batch is bytes (:class:`Batch`,
from a remote runner) or the cursors of runs in this process's session buffer
(:class:`StoredRuns`), read from the session's stream through
:class:`~sandstream.server.sessions.SessionRuns` and inserted as bytes, as a remote
runner's batch is (:func:`_insert_runs`).

Cancellation: a transaction that started completes (:mod:`sandstream.server.sqlite`);
the caller does not learn its outcome, which a retry from :meth:`~MovedChunks.last_cursor`
makes harmless.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from sandstream.server.sessions import Run, SessionRuns, split_chunks

from ..errors import ChunkGapError, ChunkShapeError, FencedError, StoredRunsMissingError
from .database import Connection, Database

T = TypeVar("T")

__all__ = [
    "Batch",
    "MovedChunks",
    "StoredRuns",
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


@dataclass(frozen=True, slots=True)
class StoredRuns:
    """Chunks ``first`` … ``last`` of a session of this process's session buffer, whose
    stored runs are ``runs`` (:attr:`Session.stored_runs
    <sandstream.server.sessions.Session.stored_runs>`). :meth:`MovedChunks.move` stores
    them in the chat database. ``last`` must be the last chunk of a stored run (a
    session's published cursor always is)."""

    runs: SessionRuns
    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


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


def _raise_fence(conn: Connection, session_id: str, generation: int) -> None:
    if check_fence(conn, session_id, generation) < generation:
        conn.execute(
            "INSERT INTO session_fences (session_id, generation) VALUES (?, ?) "
            "ON CONFLICT (session_id) DO UPDATE SET generation = excluded.generation",
            (session_id, generation),
        )


_INSERT_RUN: Final = "INSERT INTO moved_runs (session_id, first_cursor, last_cursor, chunks) "


def _insert_run(conn: Connection, session_id: str, first: int, last: int, data: bytes) -> None:
    conn.execute(_INSERT_RUN + "VALUES (?, ?, ?, ?)", (session_id, first, last, data))


def _insert_runs(conn: Connection, session_id: str, last: int, runs: Sequence[Run]) -> None:
    """In the caller's transaction: store the chunks of ``runs`` (consecutive) past
    cursor ``last`` (the last stored), a row per run; the chunks up to ``last`` were
    stored before and are skipped."""
    for run in runs:
        if run.last > last:
            rest = run.part(last, run.last)
            _insert_run(conn, session_id, rest.first, rest.last, rest.data)
            last = run.last


def _check_copied(conn: Connection, session_id: str, last: int, upto: int) -> None:
    """Raise :class:`StoredRunsMissingError` unless the stored chunks now end at ``upto``."""
    copied = _last_cursor(conn, session_id)
    if copied != upto:
        raise StoredRunsMissingError(
            f"session {session_id}: the session buffer holds its chunks up to {copied}, "
            f"not all of {last + 1}…{upto}"
        )


def _last_cursor(conn: Connection, session_id: str) -> int:
    row = conn.execute(
        "SELECT last_cursor FROM moved_runs WHERE session_id = ? "
        "ORDER BY first_cursor DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    return 0 if row is None else int(row[0])


class MovedChunks:
    """The moved chunks and the fences, in the chat database (``moved_runs`` and
    ``session_fences``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def fence(self, session_id: str, generation: int) -> None:
        """Raise the session's fence to ``generation`` (a new owner does it as it claims,
        so the previous owner's next write is refused even before this one writes).
        Raises :class:`FencedError` if a newer generation is there already."""
        await self.db.write(lambda conn: _raise_fence(conn, session_id, generation))

    async def move(self, session_id: str, generation: int, batch: Batch | StoredRuns) -> None:
        """Store ``batch`` under ``generation``, in one transaction: refused with
        :class:`FencedError` (nothing written) below the session's fence, with
        :class:`ChunkGapError` if it would leave a hole after the stored chunks, with
        :class:`ChunkShapeError` if its data is not its count of whole lines; else the
        fence is raised to ``generation`` and the chunks past the last stored cursor
        are stored, so a chunk moved twice is stored once. :class:`StoredRunsMissingError`:
        runs of a :class:`StoredRuns` are not (or no longer) in the buffer. A batch
        without chunks checks the fence only."""
        if isinstance(batch, StoredRuns):
            runs = await batch.runs.read(batch.first - 1, batch.last)
        else:
            _check_batch(session_id, batch)
            runs = [Run(batch.first, batch.data, batch.count)]

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
            _insert_runs(conn, session_id, last, runs)
            if isinstance(batch, StoredRuns):
                _check_copied(conn, session_id, last, batch.last)

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
