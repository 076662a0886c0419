"""The session buffer: every session's chunks, stored once, in its Durable Stream.

A session's output is the stream ``/v1/stream/sessions/{id}`` (``application/x-ndjson``)
of the :class:`~sandstream.server.streams.StreamStore`: a **run** (the whole lines of one
append) is one record of the stream's log, tagged with the cursor of its first line, so
its bytes are on disk once and a Durable Streams client reads the same records.
``sessions.sqlite3`` in the data dir keeps a row per session (state, times, terminal,
its cursors once it ended), not its chunks. Cursors (dense per session) find their runs
through an index in memory: kept as runs are stored, and built for a restored session
by one scan of its log, on its first read. Retention moves the stream's start to a run
and deletes the segments below it.

Calls raise :class:`sqlite3.Error` when the database fails and the stream store's
errors when it does. Cancellation: a database call that has started runs to
completion in its thread (:mod:`sandstream.server.databases.sqlite`); an append handed over is
stored and reported whether or not anyone still waits.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Literal, TypeAlias

import trio

from sandstream.server.databases import SQLiteDatabase
from sandstream.server.streams import (
    Record,
    Stream,
    StreamConfig,
    StreamError,
    StreamNotFoundError,
    StreamStore,
)

__all__ = [
    "BUFFER_FILE",
    "SESSION_CONTENT_TYPE",
    "SESSION_STREAMS",
    "Outcome",
    "Run",
    "SessionBuffer",
    "SessionRow",
    "SessionRuns",
    "SessionState",
    "split_chunks",
]

log = logging.getLogger("sandstream.sessions")

BUFFER_FILE: Final = "sessions.sqlite3"
SESSION_STREAMS: Final = "/v1/stream/sessions/"
"""Where the sessions' streams are: ``SESSION_STREAMS + session_id``."""
SESSION_CONTENT_TYPE: Final = "application/x-ndjson"
_SCAN_BYTES: Final = 4 * 1024 * 1024

SessionState: TypeAlias = Literal["running", "completed", "failed", "interrupted"]
Outcome = int | Exception
"""What a stored run reports: the session's first retained cursor, or why it failed."""

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
    "DROP TRIGGER IF EXISTS chunks_move_last_cursor",
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


class SessionRuns:
    """One session's stored runs, for another role to copy (the chat's log mover):
    handed out by :meth:`SessionBuffer.stored_runs` (:attr:`Session.stored_runs
    <sandstream.server.sessions.Session.stored_runs>`)."""

    __slots__ = ("_buffer", "_key")

    def __init__(self, buffer: SessionBuffer, key: int) -> None:
        self._buffer = buffer
        self._key = key

    async def read(self, after: int, upto: int) -> list[Run]:
        """The stored runs holding the chunks after cursor ``after`` up to ``upto``, in
        cursor order, the first one cut at ``after`` (a run ending past ``upto`` and
        runs retention deleted are not among them: the caller compares what it got
        with what it asked for)."""
        return await self._buffer.read(self._key, after, upto, 1 << 62, cut_end=False)


class _RunIndex:
    """Where a session's runs are in its stream's log: one entry per stored run."""

    __slots__ = ("counts", "ends", "firsts", "starts")

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.counts: list[int] = []
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, first: int, count: int, record: Record) -> None:
        self.firsts.append(first)
        self.counts.append(count)
        self.starts.append(record.start)
        self.ends.append(record.end)

    def holding(self, cursor: int) -> int | None:
        """The entry of the run that holds ``cursor`` (None: none does)."""
        index = bisect.bisect_right(self.firsts, cursor) - 1
        if index < 0 or cursor >= self.firsts[index] + self.counts[index]:
            return None
        return index

    def drop_below(self, index: int) -> None:
        for entries in (self.firsts, self.counts, self.starts, self.ends):
            del entries[:index]

    @property
    def last(self) -> int:
        """The cursor of the newest chunk (0: none)."""
        return self.firsts[-1] + self.counts[-1] - 1 if self.firsts else 0


@dataclass(slots=True)
class _Entry:
    """A session the buffer knows: its stream and, once known, its run index."""

    id: str
    stream: Stream
    index: _RunIndex | None


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
    """The sessions and their chunks; see the module docstring. Open with :meth:`open`
    on a running :class:`StreamStore`."""

    def __init__(self, db: SQLiteDatabase, store: StreamStore) -> None:
        self._db = db
        self._store = store
        self._entries: dict[int, _Entry] = {}

    @classmethod
    async def open(cls, data_dir: Path, store: StreamStore, *, readers: int = 4) -> SessionBuffer:
        """Open (or create) the buffer in ``data_dir``, its streams in ``store``. Chunks
        an older buffer kept in SQLite move to the streams first. Raises sqlite3.Error /
        OSError and the store's errors."""
        db = await SQLiteDatabase.open(data_dir / BUFFER_FILE, migrate=_migrate, readers=readers)
        buffer = cls(db, store)
        try:
            await buffer._move_old_chunks()
        except BaseException:
            with trio.CancelScope(shield=True):
                await db.close()
            raise
        return buffer

    @property
    def path(self) -> Path:
        """The buffer's database file."""
        return self._db.path

    def stored_runs(self, key: int) -> SessionRuns:
        """The runs of session ``key``, for another role to copy."""
        return SessionRuns(self, key)

    def stream(self, key: int) -> Stream:
        """The Durable Stream of session ``key``."""
        return self._entries[key].stream

    async def close(self) -> None:
        """Close the database (the streams are the store's). Idempotent."""
        await self._db.close()

    # -- sessions ---------------------------------------------------------------------

    async def create(self, session_id: str, created_at: int) -> int:
        """Store a new running session and create its stream; return its key."""

        def insert(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "INSERT INTO sessions (id, state, created_at) VALUES (?, 'running', ?)",
                (session_id, created_at),
            )
            key = cursor.lastrowid
            assert key is not None
            return key

        key: int = await self._db.write(insert)
        stream = await self._open_stream(session_id)
        self._entries[key] = _Entry(session_id, stream, _RunIndex())
        return key

    async def _open_stream(self, session_id: str) -> Stream:
        config = StreamConfig(SESSION_CONTENT_TYPE, None, None)
        stream, _ = await self._store.create(
            SESSION_STREAMS + session_id, config, b"", closed=False
        )
        return stream

    async def sessions(self) -> list[SessionRow]:
        """Every stored session, oldest first; a session stored as running has its
        cursors from its log (its run index is built: it may be written again). A
        session stream without a session (the process stopped between deleting the
        one and the other) is deleted."""

        def select(conn: sqlite3.Connection) -> list[SessionRow]:
            rows = conn.execute(
                "SELECT key, id, state, created_at, ended_at, terminal, first_cursor, "
                "last_cursor FROM sessions ORDER BY key"
            ).fetchall()
            return [SessionRow(*row) for row in rows]

        rows = await self._db.read(select)
        stored = {SESSION_STREAMS + row.id for row in rows}
        for path in self._store.paths(SESSION_STREAMS):
            if path not in stored:
                with contextlib.suppress(StreamError):  # deleted meanwhile
                    await self._store.delete(path)
        out = []
        for row in rows:
            entry = self._entries.get(row.key)
            if entry is None:
                try:
                    stream = self._store.get(SESSION_STREAMS + row.id)
                except StreamNotFoundError:  # lost with its data dir's streams
                    stream = await self._open_stream(row.id)
                entry = self._entries[row.key] = _Entry(row.id, stream, None)
            if row.state == "running":
                index = await self._index(entry)
                first = index.firsts[0] if index.firsts else 1
                row = replace(row, first_cursor=first, last_cursor=index.last)
            out.append(row)
        return out

    async def finish(
        self,
        key: int,
        state: SessionState,
        ended_at: int,
        terminal: bytes | None,
        first_cursor: int,
        last_cursor: int,
    ) -> None:
        """Record how a session ended (its terminal line, ``None`` if it has none, and
        its cursors) and close its stream (readers see its end)."""
        await self._db.write(
            lambda conn: conn.execute(
                "UPDATE sessions SET state = ?, ended_at = ?, terminal = ?, first_cursor = ?,"
                " last_cursor = ? WHERE key = ?",
                (state, ended_at, terminal, first_cursor, last_cursor, key),
            )
        )
        entry = self._entries.get(key)
        if entry is not None and not entry.stream.removed:
            await self._store.close(entry.stream, None)

    async def delete_ended_before(self, ended_before: int) -> list[str]:
        """Delete the sessions that ended before ``ended_before`` (ms), streams too;
        return their ids."""

        def delete(conn: sqlite3.Connection) -> list[tuple[int, str]]:
            rows = conn.execute(
                "SELECT key, id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?",
                (ended_before,),
            ).fetchall()
            for key, _ in rows:
                conn.execute("DELETE FROM sessions WHERE key = ?", (key,))
            return [(int(key), str(session_id)) for key, session_id in rows]

        deleted = await self._db.write(delete)
        for key, session_id in deleted:
            self._entries.pop(key, None)
            with contextlib.suppress(StreamError):  # gone already
                await self._store.delete(SESSION_STREAMS + session_id)
        return [session_id for _, session_id in deleted]

    # -- chunks -----------------------------------------------------------------------

    def append_soon(
        self,
        key: int,
        after: int,
        data: bytes,
        count: int,
        keep_from: int,
        report: Callable[[Outcome], object],
        *,
        offer: bool = True,
    ) -> None:
        """Hand ``data``, ``count`` whole lines (chunks at cursors ``after + 1``, …), to
        the session's stream as one run; once it is stored, ``report`` gets (on the event
        loop) the session's first retained cursor, or the exception that kept it from
        being stored. Never blocks. The stream offers the run to its live readers as it
        publishes it, right before ``report``, unless ``offer`` is false.

        Runs that hold only chunks below cursor ``keep_from`` (retention) are dropped;
        a run that straddles it is kept whole, so slightly more than asked may be
        retained. ``after`` must be the session's last cursor once the runs handed over
        before are stored (the session is the only writer of its stream).
        """
        entry = self._entries[key]
        index = entry.index
        assert index is not None, "a session is written only once its index is known"

        def stored(outcome: Record | BaseException) -> None:
            if isinstance(outcome, Exception):
                report(outcome)
            elif isinstance(outcome, BaseException):
                report(RuntimeError(f"the run was not stored: {outcome!r}"))
            else:
                index.add(after + 1, count, outcome)
                report(self._retain(entry, index, keep_from))

        try:
            self._store.append_soon(entry.stream, data, stored, tag=after + 1, offer=offer)
        except StreamError as exc:
            trio.lowlevel.current_trio_token().run_sync_soon(report, exc)

    def _retain(self, entry: _Entry, index: _RunIndex, keep_from: int) -> int:
        """Drop the runs below the one holding ``keep_from``; the first cursor kept."""
        holding = index.holding(keep_from)
        if holding:
            self._store.trim(entry.stream, index.starts[holding])
            index.drop_below(holding)
        return index.firsts[0]

    async def read(
        self, key: int, after: int, upto: int, max_bytes: int, *, cut_end: bool = True
    ) -> list[Run]:
        """The runs holding cursors ``after + 1`` … ``upto``, in order, cut to start
        at ``after + 1`` and to end by ``upto`` (``cut_end=False``: a run ending past
        ``upto`` is left out): whole runs while they fit in ``max_bytes``, always at
        least one when there is one. Empty when the chunk at ``after + 1`` is no
        longer retained: callers compare with what they asked for.
        """
        entry = self._entries[key]
        index = await self._index(entry)
        first = index.holding(after + 1)
        last = index.holding(upto)
        if first is None or last is None or after + 1 > upto:
            return []
        if not cut_end and index.firsts[last] + index.counts[last] - 1 > upto:
            last -= 1
            if last < first:
                return []
        stream = entry.stream
        try:
            records = await self._store.read_records(
                stream, index.starts[first], index.ends[last], max_bytes
            )
        except StreamError:  # retention moved the stream's start meanwhile
            return []
        runs = []
        for record in records:
            at = index.holding(record.tag if record.tag is not None else -1)
            if at is None or index.starts[at] != record.start:
                raise StreamError(f"session {entry.id}: its log and its run index disagree")
            runs.append(Run(index.firsts[at], record.payload, index.counts[at]).part(after, upto))
        return runs

    async def _index(self, entry: _Entry) -> _RunIndex:
        """The session's run index, built from its log on first use."""
        if entry.index is not None:
            return entry.index
        index = _RunIndex()
        stream = entry.stream
        position = self._store.first_position(stream)
        end = stream.tail
        while position < end:
            for record in await self._store.read_records(stream, position, end, _SCAN_BYTES):
                if record.tag is None:
                    raise StreamError(f"session {entry.id}: a run of its log has no cursor")
                index.add(record.tag, record.payload.count(b"\n"), record)
                position = record.end
        if entry.index is None:  # another reader may have built it meanwhile
            entry.index = index
        return entry.index

    async def _move_old_chunks(self) -> None:
        """Move the chunks an older buffer kept in SQLite (table ``chunks``) to the
        sessions' streams, then drop that table."""

        def old_sessions(conn: sqlite3.Connection) -> list[tuple[int, str, str]]:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chunks'"
            ).fetchone()
            if exists is None:
                return []
            return [tuple(row) for row in conn.execute("SELECT key, id, state FROM sessions")]

        sessions = await self._db.read(old_sessions)
        for key, session_id, state in sessions:
            stream = await self._open_stream(session_id)
            low = key << 32

            def chunks(conn: sqlite3.Connection, low: int = low) -> list[tuple[int, bytes]]:
                rows = conn.execute(
                    "SELECT id - ?, chunk FROM chunks WHERE id > ? AND id < ? ORDER BY id",
                    (low, low, low + (1 << 32)),
                ).fetchall()
                return [(int(first), bytes(data)) for first, data in rows]

            if stream.tail == self._store.first_position(stream):
                for first, data in await self._db.read(chunks):
                    await _append_and_wait(self._store, stream, data, first)
            if state != "running" and not stream.closing:
                await self._store.close(stream, None)
        if sessions:
            await self._db.write(lambda conn: conn.execute("DROP TABLE chunks"))
            log.info("sessions: moved the chunks of %d sessions to their streams", len(sessions))


async def _append_and_wait(store: StreamStore, stream: Stream, data: bytes, tag: int) -> None:
    done = trio.Event()
    failure: list[BaseException] = []

    def stored(outcome: Record | BaseException) -> None:
        if isinstance(outcome, BaseException):
            failure.append(outcome)
        done.set()

    store.append_soon(stream, data, stored, tag=tag)
    await done.wait()
    if failure:
        raise failure[0]
