"""One durable session: its state, reads by cursor, message, interrupt.

A session is a thin index over its Durable Stream (:attr:`Session.stream`), which owns
its bytes, its newest records in memory and its live readers; the session keeps its
state and, in the buffer (:mod:`.buffer`), the map of its cursors to the stream's
offsets. A :class:`Session` is written by one task, the session's own
(:mod:`.supervisor`): :meth:`Session.append` hands runs to the buffer, and a run is
published (the stream shows it, ``last_cursor`` moves, waiting readers wake once) only
once it is stored: **a chunk is never visible before it is stored**. Readers ask for
the chunks after their own cursor (:meth:`Session.read_runs`), from the stream's
memory or its log, one bounded batch at a time, and never skip one: a cursor retention
dropped raises :class:`CursorGoneError`. Caught-up readers wait in the stream's live
set (:mod:`.follow`): the stream offers them each stored run but the final one. The
writer waits, at most ``live_hold`` s, before handing over a new run while a live
reader is more than :data:`LIVE_LAG_BYTES` behind; one still behind then leaves the
live set and reads on by itself.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections import deque
from typing import TYPE_CHECKING, Final

import msgspec
import trio

from sandstream.core import PermissionAnswer, UserMessage
from sandstream.server.runner import TurnStream
from sandstream.server.streams import Record, Stream, wait_changed

from .buffer import Outcome, Run, SessionBuffer, SessionRuns, SessionState
from .counts import SessionCounts
from .errors import (
    CursorGoneError,
    PermissionAnsweredError,
    PermissionNotFoundError,
    SessionEndedError,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "Session",
    "SessionStatus",
    "new_session_id",
    "now_ms",
]

DEFAULT_MAX_UNSTORED: Final = 4 * 1024 * 1024
LIVE_LAG_BYTES: Final = 1024 * 1024
"""How far (bytes offered, not yet written) a live reader may fall behind before the
writer waits for it."""
DEFAULT_LIVE_HOLD: Final = 0.25
"""Seconds the writer waits at most for live readers that fell behind."""


def new_session_id() -> str:
    """A fresh session id: ``ses_`` and 16 random hex digits."""
    return f"ses_{secrets.token_hex(8)}"


def now_ms() -> int:
    """Wall-clock time as Unix epoch milliseconds."""
    return time.time_ns() // 1_000_000


class SessionStatus(msgspec.Struct, frozen=True):
    """``GET /sessions/{id}/status``. Times are Unix epoch ms; ``terminal`` is the
    session's terminal line (its last chunk) once it ended, else null."""

    id: str
    state: SessionState
    last_chunk_id: int
    first_chunk_id: int
    created_at: int
    ended_at: int | None
    terminal: msgspec.Raw | None


class Session:
    """A session's live state; see the module docstring.

    ``turn`` is the running turn (``None`` for a session restored from the buffer).
    ``messages`` is the sending side of the container's stdin message lines.
    ``counts`` gets the chunks and bytes of each run stored (its service's).
    """

    def __init__(
        self,
        buffer: SessionBuffer,
        *,
        counts: SessionCounts,
        key: int,
        id: str,
        created_at: int,
        state: SessionState = "running",
        ended_at: int | None = None,
        terminal: bytes | None = None,
        first_cursor: int = 1,
        last_cursor: int = 0,
        turn: TurnStream | None = None,
        messages: trio.MemorySendChannel[bytes] | None = None,
        retain_chunks: int | None = None,
        max_unstored: int = DEFAULT_MAX_UNSTORED,
        live_hold: float = DEFAULT_LIVE_HOLD,
    ) -> None:
        self.buffer = buffer
        self.stream: Stream = buffer.stream(key)
        """The session's Durable Stream: its bytes, its newest records, its live set."""
        self.key = key
        self.id = id
        self.created_at = created_at
        self.state: SessionState = state
        self.ended_at = ended_at
        self.terminal = terminal
        self.first_cursor = first_cursor
        """The lowest cursor still retained."""
        self.last_cursor = last_cursor
        """The cursor of the newest chunk (0: none yet)."""
        self.turn = turn
        self._messages = messages
        self._message_lock = trio.Lock()
        self._answered: set[str] = set()
        """The permission requests answered through :meth:`answer_permission`."""
        self._retain = retain_chunks
        self._max_unstored = max_unstored
        self._counts = counts
        self._submitted = last_cursor
        """The cursor of the newest chunk handed to the buffer (stored or not yet)."""
        self._unstored = 0
        """Bytes handed to the buffer and not stored yet."""
        self._failure: Exception | None = None
        """Why a run could not be stored: nothing after it is stored or published."""
        self._handed: deque[Run] = deque()
        """The runs handed to the buffer and not stored yet, oldest first."""
        self._stored = trio.Event()
        """Set (and replaced) when a run handed over is stored or failed: the writer's."""
        self._live_hold = live_hold
        self.closed = trio.Event()
        """Set once the session has ended and its container is gone."""
        if state != "running":
            self.closed.set()

    @property
    def ended(self) -> bool:
        """True once the session's last chunk is in the buffer (nothing more comes)."""
        return self.state != "running"

    @property
    def stored_runs(self) -> SessionRuns:
        """This session's runs as the buffer stores them, for another database to copy
        inside SQLite (:class:`~.buffer.SessionRuns`). Only chunks up to
        :attr:`last_cursor` are sure to be stored."""
        return self.buffer.stored_runs(self.key)

    @property
    def live_readers(self) -> int:
        """How many caught-up readers the stream offers its runs to now."""
        return self.stream.live_readers

    def status(self) -> SessionStatus:
        return SessionStatus(
            id=self.id,
            state=self.state,
            last_chunk_id=self.last_cursor,
            first_chunk_id=self.first_cursor,
            created_at=self.created_at,
            ended_at=self.ended_at,
            terminal=None if self.terminal is None else msgspec.Raw(self.terminal.rstrip(b"\n")),
        )

    # -- the writer (the session's own task) ----------------------------------------------

    async def append(self, data: bytes, *, count: int | None = None, final: bool = False) -> None:
        """Hand ``data`` (whole lines, each a chunk; ``count`` of them, when the caller
        knows) to the buffer as one run; once it
        is stored it is published (:meth:`_publish`). Returns at once unless more than
        ``max_unstored`` bytes of this session wait to be stored: then it waits for
        room (the container meanwhile blocks on its pipe: memory stays bounded); or
        while a live reader is behind (see the module docstring).

        Raises the error that kept an earlier run from being stored (the stream store's;
        nothing after it is stored or published). Cancellation: while it waits for
        room, before ``data`` was handed over.
        """
        while self._unstored > self._max_unstored and self._failure is None:
            await self._stored.wait()
        if self._failure is not None:
            raise self._failure
        if not data:
            return
        if self.stream.live_readers:
            await self._wait_for_live()
        if count is None:
            count = data.count(b"\n")
        after = self._submitted
        keep_from = self.first_cursor
        if self._retain is not None:
            keep_from = max(keep_from, after + count - self._retain + 1)
        run = Run(after + 1, data, count)
        self._handed.append(run)
        self.buffer.append_soon(
            self.key,
            after,
            data,
            count,
            keep_from,
            functools.partial(self._publish, run),
            offer=not final,
        )
        self._submitted = after + count
        self._unstored += len(data)

    async def flush(self) -> None:
        """Wait until every run handed to :meth:`append` is stored and published.
        Raises like :meth:`append`."""
        while self._unstored and self._failure is None:
            await self._stored.wait()
        if self._failure is not None:
            raise self._failure

    def _publish(self, run: Run, outcome: Outcome) -> None:
        """On the event loop, once ``run`` is stored (``outcome``: the first retained
        cursor; the stream has shown it and offered it to its live readers) or failed
        (the exception): move the cursors, and wake the writer if it waits."""
        handed = self._handed
        if handed and handed[0] is run:
            handed.popleft()
        else:  # one refused at once is reported before the ones handed over before it
            handed.remove(run)
        self._unstored -= run.size
        self._stored.set()
        self._stored = trio.Event()
        if isinstance(outcome, Exception):
            self._failure = self._failure or outcome
            return
        counts = self._counts
        counts.chunks += run.count
        counts.bytes += run.size
        self.first_cursor = outcome
        self.last_cursor = run.last

    def run_of(self, record: Record) -> Run:
        """The run ``record`` of the session's stream holds (the same object for every
        reader: framed once per transport). The stream offers a record before the
        session hears it was stored: it is the oldest run handed over."""
        handed = self._handed
        if handed and handed[0].first == record.tag:
            return handed[0]
        payload = record.payload
        return Run(record.tag or 0, payload, payload.count(b"\n"))

    async def end(self, state: SessionState, terminal: bytes | None) -> None:
        """Record the end (buffer first: its stream closed), then wake every reader and
        refuse further messages.

        ``terminal`` is the last chunk when the session ended with one. A buffer that
        fails here is logged by the caller; the session still ends in memory (also when
        cancelled meanwhile).
        """
        ended_at = now_ms()
        try:  # readers see the end once the session's stream is closed
            await self.buffer.finish(
                self.key, state, ended_at, terminal, self.first_cursor, self.last_cursor
            )
        finally:
            self.state = state
            self.ended_at = ended_at
            self.terminal = terminal
            if self._messages is not None:
                self._messages.close()
            self.stream.notify()  # its readers see the end (also if its stream failed)

    # -- readers ----------------------------------------------------------------------

    def check_cursor(self, cursor: int) -> None:
        """Raise :class:`CursorGoneError` if the chunks after ``cursor`` are not all kept."""
        if cursor < self.first_cursor - 1:
            raise CursorGoneError(cursor, self.first_cursor)

    async def read_runs(self, after: int, max_bytes: int) -> list[Run]:
        """The chunks after cursor ``after`` as the runs they were stored in (the first
        one cut at ``after``): whole runs while they fit in ``max_bytes``, at least one
        if there is one (:class:`~.follow.Follow` hands them out; only a transport that
        needs chunks one by one splits them). Empty when ``after`` is the last cursor.
        Raises :class:`CursorGoneError`.
        """
        self.check_cursor(after)
        last = self.last_cursor
        if after >= last:
            return []
        runs = await self.buffer.read(self.key, after, last, max_bytes)
        if not runs:  # deleted between our check and the read
            raise CursorGoneError(after, self.first_cursor)
        return runs

    async def wait_beyond(self, cursor: int, timeout: float) -> bool:
        """Wait until there is a chunk after ``cursor`` or the session ended.

        Returns False if ``timeout`` seconds passed first.
        """
        return await wait_changed(
            self.stream,
            lambda: self.last_cursor > cursor or self.ended,
            trio.current_time() + timeout,
        )

    # -- mutations --------------------------------------------------------------------

    async def send_message(self, text: str) -> int:
        """Hand ``text`` to the container's stdin; return the cursor it was taken at.

        Messages (and permission answers) are serialized per session. Raises
        :class:`SessionEndedError` if the session has ended or its container is gone.
        Cancellation: the message may or may not have been handed over.
        """
        async with self._message_lock:
            return await self._send(UserMessage(text=text))

    async def answer_permission(self, answer: PermissionAnswer) -> int:
        """Hand the answer to permission request ``answer.id`` to the container's stdin,
        in order with the messages; return the cursor it was taken at.

        The first answer wins: raises :class:`PermissionAnsweredError` for a request
        answered before, or already resolved in the stream (timed out, cancelled), and
        :class:`PermissionNotFoundError` for one the agent never asked (so far);
        :class:`SessionEndedError` as :meth:`send_message`. Cancellation: as
        :meth:`send_message` (an answer that was handed over counts as given).
        """
        async with self._message_lock:
            turn = self.turn
            if self.ended or turn is None:
                raise self._ended_error()
            row = turn.processor.turn.permissions.get(answer.id)
            if row is None:
                raise PermissionNotFoundError(answer.id)
            if answer.id in self._answered or row.status != "pending":
                raise PermissionAnsweredError(answer.id, row.reply)
            self._answered.add(answer.id)
            return await self._send(answer)

    async def _send(self, line: UserMessage | PermissionAnswer) -> int:
        if self.ended or self._messages is None:
            raise self._ended_error()
        try:
            await self._messages.send(msgspec.json.encode(line) + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise self._ended_error() from None
        return self.last_cursor

    def _ended_error(self) -> SessionEndedError:
        return SessionEndedError(self.id, state=self.state, last_chunk_id=self.last_cursor)

    async def interrupt(self) -> None:
        """End the session with ``error{code:"interrupted"}`` and wait until its container
        is gone. Idempotent; does nothing to a session that has already ended."""
        if self.turn is not None and not self.ended:
            self.turn.end("interrupted", "the session was interrupted")
        await self.closed.wait()

    # -- internals -------------------------------------------------------------------

    async def _wait_for_live(self) -> None:
        """Wait, at most ``live_hold`` s, while live readers are more than
        :data:`LIVE_LAG_BYTES` behind (their client paused: the container then waits on
        its pipe, as an attached client holds it back); then take out those still
        behind: they read on by themselves, and a stalled reader holds the writer back
        once, not at every run."""
        live = self.stream.live
        if not live.behind(LIVE_LAG_BYTES):
            return
        with trio.move_on_after(self._live_hold):
            while live.behind(LIVE_LAG_BYTES):
                await live.until_drained()
            return
        live.take_out(live.behind(LIVE_LAG_BYTES))
