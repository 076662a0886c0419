"""The session buffer: every chunk of every session, in SQLite, by cursor.

One file, ``sessions.sqlite3`` in the data dir (WAL, 32 KiB pages), driven through
:class:`~sandstream.server.sqlite.SQLiteDatabase`: nothing runs on the event loop. A row of
``chunks`` is a **run**, the whole lines of one append, its id ``key * 2**32`` plus the
cursor of its first line (cursors are dense per session): a read after a cursor is one
seek and one range scan. Runs are stored by the :mod:`.appender`'s thread; retention
deletes whole runs from below. Another role's database copies runs through
:class:`SessionRuns`: the file, schema and keys stay this module's.

Calls raise :class:`sqlite3.Error` when the database fails. Cancellation: a call that
has started runs to completion in its thread (:mod:`sandstream.server.sqlite`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, Protocol, TypeAlias

from sandstream.server.sqlite import SQLiteDatabase

from .appender import Appender, Outcome, RunJob

__all__ = [
    "BUFFER_FILE",
    "CURSOR_SPAN",
    "PAGE_SIZE",
    "AttachedRuns",
    "Run",
    "SessionBuffer",
    "SessionRow",
    "SessionRuns",
    "SessionState",
    "runs_after",
    "split_chunks",
]

BUFFER_FILE: Final = "sessions.sqlite3"
PAGE_SIZE: Final = 32 * 1024
"""The page size of a new buffer file (an existing one keeps its own)."""
CURSOR_SPAN: Final = 1 << 32
"""Cursors of one session are below this; a chunk's row id is ``key * CURSOR_SPAN + cursor``."""

SessionState: TypeAlias = Literal["running", "completed", "failed", "interrupted"]


class AttachingDatabase(Protocol):
    """A database that attaches another's file read-only (:class:`SQLiteDatabase`)."""

    async def attach_read_only(self, path: Path) -> str: ...


_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS sessions (
        key INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        state TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        ended_at INTEGER,
        terminal BLOB,
        first_cursor INTEGER NOT NULL DEFAULT 1,
        last_cursor INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS chunks (
        id INTEGER PRIMARY KEY,
        count INTEGER NOT NULL,
        chunk BLOB NOT NULL,
        created_at INTEGER NOT NULL
    )""",
    # A run's insert moves its session's last cursor: an append is one statement.
    """CREATE TRIGGER IF NOT EXISTS chunks_move_last_cursor AFTER INSERT ON chunks
    BEGIN
        UPDATE sessions SET last_cursor = NEW.id - (NEW.id >> 32 << 32) + NEW.count - 1
        WHERE key = NEW.id >> 32;
    END""",
)


def split_chunks(data: bytes) -> list[bytes]:
    """The chunks of a run: its ``\\n``-terminated lines, each with its ``\\n``.

    ``bytes.splitlines`` splits in C, but also at a ``\\r`` (JSON whitespace may hold
    one): such a run is split at ``\\n`` only, line by line.
    """
    if 13 not in data:
        return data.splitlines(keepends=True)
    return [line + b"\n" for line in data.split(b"\n")[:-1]]


class Run:
    """Chunks stored together: cursors ``first`` … ``last``, their bytes joined in
    ``data`` (each chunk one ``\\n``-terminated line). Split into chunks on the first
    use of :attr:`lines` (a run nobody reads chunk by chunk is never split)."""

    __slots__ = ("_lines", "count", "data", "first", "last", "size")

    def __init__(self, first: int, data: bytes, count: int) -> None:
        self.first = first
        self.count = count
        self.last = first + count - 1
        self.data = data
        self.size = len(data)
        self._lines: list[bytes] | None = None

    @property
    def lines(self) -> list[bytes]:
        """The chunks, in order (shared: never to be changed by a caller)."""
        if self._lines is None:
            self._lines = split_chunks(self.data)
        return self._lines

    def part(self, after: int, upto: int) -> Run:
        """The run of this one's chunks after cursor ``after`` up to ``upto`` (itself
        when that is all of it)."""
        if after < self.first and upto >= self.last:
            return self
        lines = self.lines[max(after + 1 - self.first, 0) : upto + 1 - self.first]
        part = Run(max(after + 1, self.first), b"".join(lines), len(lines))
        part._lines = lines
        return part


def runs_after(runs: list[Run], after: int, max_bytes: int) -> list[Run]:
    """Of ``runs`` (consecutive, the last holding the newest chunks), those after cursor
    ``after``, the first one cut there; whole runs while they fit in ``max_bytes``,
    always at least one (empty when none holds a chunk after ``after``)."""
    index = len(runs) - 1
    while index > 0 and runs[index].first > after + 1:  # readers are mostly near the end
        index -= 1
    out: list[Run] = []
    size = 0
    for run in runs[index:]:
        if run.last <= after:
            continue
        if out and size + run.size > max_bytes:
            break
        run = run.part(after, run.last)
        out.append(run)
        size += run.size
    return out


class SessionRuns:
    """One session's runs as the buffer stores them, for another role's database: a
    SQLite one copies them inside SQLite (:meth:`attach` the buffer to it, then select
    the runs in its own ``INSERT … SELECT``: :class:`AttachedRuns`), any other reads
    their bytes (:meth:`read`). Handed out by :meth:`SessionBuffer.stored_runs`
    (:attr:`Session.stored_runs <sandstream.server.sessions.Session.stored_runs>`):
    the buffer's file, tables and keys stay the buffer's own."""

    __slots__ = ("_db", "_key")

    def __init__(self, db: SQLiteDatabase, key: int) -> None:
        self._db = db
        self._key = key

    async def read(self, after: int, upto: int) -> list[Run]:
        """The stored runs holding the chunks after cursor ``after`` up to ``upto``, in
        cursor order, the first one cut at ``after`` (a run ending past ``upto`` and
        runs retention deleted are not among them: the caller compares what it got
        with what it asked for). Reads the buffer in a worker thread."""
        low = self._key * CURSOR_SPAN

        def run(conn: sqlite3.Connection) -> list[Run]:
            (start,) = conn.execute(
                "SELECT max(id) FROM chunks WHERE id > ? AND id <= ?", (low, low + after + 1)
            ).fetchone()
            if start is None:
                return []
            rows = conn.execute(
                "SELECT id - ?, count, chunk FROM chunks WHERE id >= ? AND id <= ? "
                "AND id - ? + count - 1 <= ? ORDER BY id",
                (low, start, low + upto, low, upto),
            ).fetchall()
            return [Run(first, bytes(data), count).part(after, upto) for first, count, data in rows]

        return await self._db.read(run)

    async def attach(self, db: AttachingDatabase) -> AttachedRuns:
        """Attach the buffer's file read-only to ``db``'s writer connection (once per
        file: :meth:`~sandstream.server.sqlite.SQLiteDatabase.attach_read_only`, which
        says why read-only) and return this session's runs there. Raises
        :class:`sqlite3.OperationalError` if the file cannot be opened. Runs in a
        worker thread; cancelled, it may have attached the file (harmless: a file is
        attached once, and detached by ``db.detach_all``)."""
        return AttachedRuns(await db.attach_read_only(self._db.path), self._key)


class AttachedRuns:
    """A session's runs in a buffer attached to another database's writer connection
    (:meth:`SessionRuns.attach`). Its methods run in that connection's transaction
    (``conn`` must be it), which sees a snapshot of the buffer; a cursor is never
    formatted into SQL."""

    __slots__ = ("_low", "_schema")

    def __init__(self, schema: str, key: int) -> None:
        self._schema = schema
        self._low = key * CURSOR_SPAN

    def run_start(self, conn: sqlite3.Connection, cursor: int) -> int | None:
        """The first cursor of the newest stored run that starts at or below ``cursor``
        (the run holding it, if it is stored); None when none is retained (retention
        deletes from below)."""
        (start,) = conn.execute(
            f"SELECT max(id) - ? FROM {self._schema}.chunks WHERE id > ? AND id <= ?",
            (self._low, self._low, self._low + cursor),
        ).fetchone()
        return None if start is None else int(start)

    def run(self, conn: sqlite3.Connection, first: int) -> Run | None:
        """The stored run that starts at cursor ``first``, its bytes read into Python
        (None if there is none)."""
        row = conn.execute(
            f"SELECT count, chunk FROM {self._schema}.chunks WHERE id = ?", (self._low + first,)
        ).fetchone()
        return None if row is None else Run(first, bytes(row[1]), int(row[0]))

    def select(self, after: int, upto: int) -> tuple[str, dict[str, int]]:
        """A ``SELECT`` of the stored runs that start after cursor ``after`` and end by
        ``upto``, in cursor order, as rows ``(first_cursor, last_cursor, chunks)``, and
        its parameters (named ``runs_…``: the caller's own may stand beside them). Put
        in an ``INSERT … SELECT``, the runs go from one file to the other inside SQLite.
        A run that holds ``after + 1`` without starting there is not among them
        (:meth:`run_start` finds it), nor are runs retention deleted: the caller
        compares what it copied with what it asked for."""
        sql = (
            "SELECT id - :runs_low AS first_cursor, id - :runs_low + count - 1 AS last_cursor, "
            f"chunk AS chunks FROM {self._schema}.chunks "
            "WHERE id > :runs_low + :runs_after AND id <= :runs_low + :runs_upto "
            "AND id - :runs_low + count - 1 <= :runs_upto ORDER BY id"
        )
        return sql, {"runs_low": self._low, "runs_after": after, "runs_upto": upto}


def _migrate(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A session as stored. Times are Unix epoch milliseconds."""

    key: int
    id: str
    state: SessionState
    created_at: int
    ended_at: int | None
    terminal: bytes | None
    first_cursor: int
    last_cursor: int


class SessionBuffer:
    """The sessions and their chunks; see the module docstring. Open with :meth:`open`."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self._db = db
        self._appender = Appender(db)

    @classmethod
    async def open(cls, data_dir: Path, *, readers: int = 4) -> SessionBuffer:
        """Open (or create) the buffer in ``data_dir``. Raises sqlite3.Error / OSError."""
        db = await SQLiteDatabase.open(
            data_dir / BUFFER_FILE, migrate=_migrate, readers=readers, page_size=PAGE_SIZE
        )
        buffer = cls(db)
        buffer._appender.start()
        return buffer

    @property
    def path(self) -> Path:
        """The buffer's database file."""
        return self._db.path

    def stored_runs(self, key: int) -> SessionRuns:
        """The runs of session ``key`` for another database to copy in SQL."""
        return SessionRuns(self._db, key)

    async def close(self) -> None:
        """Store and report the runs handed over, then close every connection. Idempotent."""
        try:
            await self._appender.close()
        finally:
            await self._db.close()

    # -- sessions ---------------------------------------------------------------------

    async def create(self, session_id: str, created_at: int) -> int:
        """Store a new running session; return its key."""

        def insert(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "INSERT INTO sessions (id, state, created_at) VALUES (?, 'running', ?)",
                (session_id, created_at),
            )
            key = cursor.lastrowid
            assert key is not None
            return key

        return await self._db.write(insert)

    async def sessions(self) -> list[SessionRow]:
        """Every stored session, oldest first."""

        def select(conn: sqlite3.Connection) -> list[SessionRow]:
            rows = conn.execute(
                "SELECT key, id, state, created_at, ended_at, terminal, first_cursor, "
                "last_cursor FROM sessions ORDER BY key"
            ).fetchall()
            return [SessionRow(*row) for row in rows]

        return await self._db.read(select)

    async def finish(
        self, key: int, state: SessionState, ended_at: int, terminal: bytes | None
    ) -> None:
        """Record how a session ended (its terminal line, ``None`` if it has none)."""
        await self._db.write(
            lambda conn: conn.execute(
                "UPDATE sessions SET state = ?, ended_at = ?, terminal = ? WHERE key = ?",
                (state, ended_at, terminal, key),
            )
        )

    async def delete_ended_before(self, ended_before: int) -> list[str]:
        """Delete the sessions that ended before ``ended_before`` (ms); return their ids."""

        def delete(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT key, id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?",
                (ended_before,),
            ).fetchall()
            for key, _ in rows:
                conn.execute(
                    "DELETE FROM chunks WHERE id > ? AND id < ?",
                    (key * CURSOR_SPAN, (key + 1) * CURSOR_SPAN),
                )
                conn.execute("DELETE FROM sessions WHERE key = ?", (key,))
            return [session_id for _, session_id in rows]

        return await self._db.write(delete)

    # -- chunks -----------------------------------------------------------------------

    def append_soon(
        self,
        key: int,
        after: int,
        data: bytes,
        count: int,
        created_at: int,
        keep_from: int,
        report: Callable[[Outcome], object],
    ) -> None:
        """Hand ``data``, ``count`` whole lines (chunks at cursors ``after + 1``, …), to
        the appender (:mod:`.appender`), which stores it as one run and then calls
        ``report`` on the event loop with the session's first retained cursor, or with
        the exception that kept it from being stored. Never blocks.

        Runs that hold only chunks below cursor ``keep_from`` (retention) are deleted in
        the same transaction; a run that straddles it is kept whole, so slightly more
        than asked may be retained. ``after`` must be the session's last cursor once
        the runs handed over before are stored (the session is the only writer of its
        rows). Raises :class:`ValueError` past the session's last possible cursor.
        """
        low = key * CURSOR_SPAN
        if after + count >= CURSOR_SPAN:
            raise ValueError(f"session {key} ran out of cursors")
        row = (low + after + 1, count, data, created_at)

        def store(conn: sqlite3.Connection) -> int:
            conn.execute(  # its trigger moves the session's last_cursor
                "INSERT INTO chunks (id, count, chunk, created_at) VALUES (?, ?, ?, ?)", row
            )
            if keep_from <= 1:  # nothing to drop
                return 1
            conn.execute(
                "DELETE FROM chunks WHERE id > ? AND id < ? AND id + count <= ?",
                (low, low + keep_from, low + keep_from),
            )
            (first_id,) = conn.execute(
                "SELECT min(id) FROM chunks WHERE id > ? AND id < ?", (low, low + CURSOR_SPAN)
            ).fetchone()
            first = int(first_id) - low
            conn.execute("UPDATE sessions SET first_cursor = ? WHERE key = ?", (first, key))
            return first

        self._appender.submit(RunJob(key, after, store, report))

    async def read(self, key: int, after: int, upto: int, max_bytes: int) -> list[Run]:
        """The runs holding cursors ``after + 1`` … ``upto``, in order, cut to start
        at ``after + 1`` and end by ``upto``: whole runs while they fit in ``max_bytes``,
        always at least one when there is one. Empty when the chunk at ``after + 1`` is
        no longer retained: callers compare with what they asked for.
        """
        low = key * CURSOR_SPAN

        def select(conn: sqlite3.Connection) -> list[Run]:
            (start,) = conn.execute(  # the run holding cursor after + 1
                "SELECT max(id) FROM chunks WHERE id > ? AND id <= ?", (low, low + after + 1)
            ).fetchone()
            if start is None:
                return []
            out: list[Run] = []
            size = 0
            cursor = after
            for row_id, count, data in conn.execute(
                "SELECT id, count, chunk FROM chunks WHERE id >= ? AND id <= ? ORDER BY id",
                (start, low + upto),
            ):
                run = Run(row_id - low, data, count)
                if run.first > cursor + 1:
                    break  # a gap: deleted by retention
                if run.last <= cursor:
                    continue
                if out and size + run.size > max_bytes:
                    break
                run = run.part(cursor, upto)
                out.append(run)
                size += run.size
                cursor = run.last
            return out

        return await self._db.read(select)
