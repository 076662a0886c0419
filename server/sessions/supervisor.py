"""The session service: creates sessions, runs one nursery per session, restores, retires.

A session is a runner turn (same admission, launcher, core and teardown) whose output
goes to the buffer; its task enters the :class:`TurnStream` and appends inside it, so
whatever ends the turn ends the session, and a failing append stops the container::

    service = SessionService(runner, SessionSettings(data_dir=...))
    await nursery.start(service.run)            # opens the buffer, restores sessions
    session = await service.create(dispatch)    # AtCapacityError / ShuttingDownError
    await service.close()                       # ends live sessions ("shutdown"), closes

Restart and cancellation: a session stored as running, or whose task is cancelled, ends
with ``error{code:"runner_lost"}`` (or the terminal it already has).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Final

import msgspec
import trio

from sandstream.core import Dispatch, StreamProcessor
from sandstream.server.runner import Runner, TurnStream
from sandstream.server.streams import StreamError, StreamStore

from .buffer import SESSION_STREAMS, SessionBuffer, SessionRow, SessionState
from .counts import SessionCounts
from .errors import SessionNotFoundError
from .session import Session, new_session_id, now_ms
from .settings import SessionSettings

__all__ = ["RUNNER_LOST", "SessionService", "terminal_state"]

log = logging.getLogger("sandstream.sessions")

RUNNER_LOST: Final = "runner_lost"
"""Error code appended to a session whose runner died while it ran."""


class _Terminal(msgspec.Struct):
    type: str
    code: str | None = None


def terminal_state(line: bytes) -> SessionState | None:
    """The state a session ends in when ``line`` is its last chunk; ``None`` if it is
    not a terminal line."""
    try:
        kind = msgspec.json.decode(line, type=_Terminal)
    except msgspec.DecodeError:
        return None
    if kind.type == "result":
        return "completed"
    if kind.type == "error":
        return "interrupted" if kind.code == "interrupted" else "failed"
    return None


class SessionService:
    """Sessions of one runner; see the module docstring."""

    def __init__(
        self, runner: Runner, settings: SessionSettings, store: StreamStore | None = None
    ) -> None:
        self.runner = runner
        self.settings = settings
        self.store = store or StreamStore.from_settings(
            settings.stream_settings, server_prefixes=(SESSION_STREAMS,)
        )
        """Where the sessions' output is: each session is a Durable Stream of it."""
        self.counts = SessionCounts()
        """Chunks and bytes stored, readers connected: the sessions' metrics."""
        self._sessions: dict[str, Session] = {}
        self._buffer: SessionBuffer | None = None
        self._nursery: trio.Nursery | None = None
        self._closing = trio.Event()
        self._closed = trio.Event()

    @property
    def buffer(self) -> SessionBuffer:
        if self._buffer is None:
            raise RuntimeError("the session service is not running")
        return self._buffer

    def get(self, session_id: str) -> Session:
        """The session ``session_id``; raises :class:`SessionNotFoundError`."""
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFoundError(session_id) from None

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    # -- lifetime -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the stream store and the buffer, restore sessions, then own the session
        tasks until :meth:`close` (then the store closes, after the sessions).

        Cancellation: every session's container is still stopped and reaped (the
        turn's teardown is shielded), but no terminal is appended; the next start
        marks those sessions ``runner_lost``.
        """
        try:
            async with trio.open_nursery() as outer:
                store = trio.CancelScope()
                await outer.start(_run_in, store, self.store.run)
                try:
                    self._buffer = await SessionBuffer.open(
                        self.settings.data_dir, self.store, readers=self.settings.readers
                    )
                    try:
                        await self._serve(task_status)
                    finally:
                        with trio.CancelScope(shield=True):
                            await self._buffer.close()
                finally:
                    store.cancel()
        finally:
            self._nursery = None
            self._closed.set()

    async def _serve(self, task_status: trio.TaskStatus[None]) -> None:
        await self._restore()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.settings.ttl is not None:
                nursery.start_soon(self._retire_expired, self.settings.ttl)
            task_status.started()
            await self._closing.wait()
            await self._end_live()
            nursery.cancel_scope.cancel()

    async def close(self) -> None:
        """End every live session with ``error{code:"shutdown"}`` and close the buffer.

        Returns once every session's container is gone. Idempotent.
        """
        self._closing.set()
        if self._buffer is not None:
            await self._closed.wait()

    # -- sessions -------------------------------------------------------------------

    async def create(self, dispatch: Dispatch) -> Session:
        """Admit and start a session running ``dispatch``; return it (running).

        Raises :class:`~sandstream.server.runner.admission.AtCapacityError` /
        ``ShuttingDownError`` (the runner's admission), :class:`sqlite3.Error` and
        :class:`~sandstream.server.streams.StreamError` (the buffer).
        Cancellation before it returns: nothing is started.
        """
        nursery = self._nursery
        if nursery is None or self._closing.is_set():
            raise RuntimeError("the session service is not running")
        send, receive = trio.open_memory_channel[bytes](0)
        turn = self.runner.open_turn(dispatch, messages=receive)
        try:
            session_id = new_session_id()
            created_at = now_ms()
            key = await self.buffer.create(session_id, created_at)
        except BaseException:
            turn.discard()
            receive.close()
            raise
        session = Session(
            self.buffer,
            counts=self.counts,
            key=key,
            id=session_id,
            created_at=created_at,
            turn=turn,
            messages=send,
            retain_chunks=self.settings.retain_chunks,
        )
        self._sessions[session_id] = session
        nursery.start_soon(self._run_session, session, turn)
        return session

    async def _run_session(self, session: Session, turn: TurnStream) -> None:
        """The session's task: its turn's output appended to the buffer, then its end."""
        try:
            async with turn:
                await _pump(session, turn)
        except* (sqlite3.Error, StreamError) as failed:
            log.error("session %s: the buffer failed, session ended: %r", session.id, failed)
        except* Exception:
            log.exception("session %s failed", session.id)
        finally:
            turn.discard()  # never entered (cancelled before): give its slot back
            with trio.CancelScope(shield=True):
                if not session.ended:  # stopped before its end was settled
                    await _end_unfinished(session)
            session.turn = None  # its core state (every step row) is not needed any more
            session.closed.set()

    async def _end_live(self) -> None:
        live = [s for s in self._sessions.values() if not s.closed.is_set()]
        for session in live:
            if session.turn is not None:
                session.turn.end("shutdown", "the runner is shutting down")
        for session in live:
            await session.closed.wait()

    async def _restore(self) -> None:
        for row in await self.buffer.sessions():
            session = _restored(self.buffer, self.counts, row, self.settings)
            self._sessions[row.id] = session
            if row.state == "running":
                await _end_unfinished(session)
                session.closed.set()
                log.warning("session %s: its runner was lost; ended", session.id)

    async def _retire_expired(self, ttl: float) -> None:
        """Delete the sessions that ended more than ``ttl`` seconds ago, periodically."""
        while True:
            await trio.sleep(min(self.settings.sweep_interval, ttl))
            try:
                gone = await self.buffer.delete_ended_before(now_ms() - int(ttl * 1000))
            except (sqlite3.Error, StreamError) as exc:
                log.error("retiring expired sessions failed: %r", exc)
                continue
            for session_id in gone:
                self._sessions.pop(session_id, None)


async def _pump(session: Session, turn: TurnStream) -> None:
    """Read the turn's output and append it; the buffer stores it meanwhile.

    Reads go on while the buffer stores the previous ones, up to the session's bound
    on unstored bytes (then the container blocks on its pipe). The session ends as soon
    as the run holding the terminal line is stored. A failed store raises here at the
    next append, which leaves the turn: it stops the container.
    """
    async for data in turn:  # to its end: the turn then ends as it ended, not cancelled
        final = turn.processor.ended
        await session.append(data, count=turn.last_lines, final=final)
        if final:
            await session.flush()
            await _record_end(session, data[data.rfind(b"\n", 0, -1) + 1 :])
    await session.flush()


async def _record_end(session: Session, last_line: bytes | None) -> None:
    """End ``session`` with ``last_line`` if it is a terminal, else append
    ``error{code:"runner_lost"}`` (made by the core) and end with that. Never raises
    for a failing buffer (logged; the session still ends in memory)."""
    state = None if last_line is None else terminal_state(last_line)
    terminal = last_line if state is not None else None
    if state is None:
        line = StreamProcessor("ndjson").fail(
            RUNNER_LOST, "the runner stopped serving the session before it ended"
        )
        try:
            await session.append(line, final=True)
            await session.flush()
            terminal = line
        except Exception as exc:  # the buffer failed (sqlite3.Error) or refused an earlier run
            log.error("session %s: appending its end failed: %r", session.id, exc)
        state = "failed"
    try:
        await session.end(state, terminal)
    except (sqlite3.Error, StreamError) as exc:
        log.error("session %s: recording its end failed: %r", session.id, exc)


async def _end_unfinished(session: Session) -> None:
    """End a session whose task stopped (or whose runner died) before its end was
    settled: with its last stored chunk if that is a terminal line, else with
    ``runner_lost``. Waits for the runs handed to the buffer first."""
    last = None
    try:
        await session.flush()
        last = await _last_chunk(session)
    except Exception as exc:  # as in _record_end: the session ends all the same
        log.error("session %s: storing or reading its last chunk failed: %r", session.id, exc)
    await _record_end(session, last)


async def _last_chunk(session: Session) -> bytes | None:
    if session.last_cursor < session.first_cursor:
        return None
    runs = await session.buffer.read(
        session.key, session.last_cursor - 1, session.last_cursor, 1 << 30
    )
    return runs[0].data if runs else None


async def _run_in(
    scope: trio.CancelScope,
    run: Callable[..., Awaitable[None]],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``run(task_status=...)`` inside ``scope``, so its owner can stop it."""
    with scope:
        await run(task_status=task_status)


def _restored(
    buffer: SessionBuffer, counts: SessionCounts, row: SessionRow, settings: SessionSettings
) -> Session:
    return Session(
        buffer,
        counts=counts,
        key=row.key,
        id=row.id,
        created_at=row.created_at,
        state=row.state,
        ended_at=row.ended_at,
        terminal=row.terminal,
        first_cursor=row.first_cursor,
        last_cursor=row.last_cursor,
        retain_chunks=settings.retain_chunks,
    )
