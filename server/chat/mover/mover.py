"""The log mover: exactly one replica follows each open session, under a lease, folds
its chunks as they come and settles it when it ends.

:class:`LogMover` sweeps (``open_sessions()``, every ``sweep_interval``) and moves each
session it does not move yet (:meth:`~LogMover.move`); :meth:`LogMover.claim_now`
starts one at once. Each batch of chunks is fed to the session's :class:`Fold` (in a
worker thread; then ``on_progress`` looks at the fold) and, with ``keep_chunks``, also
stored in the chat database; a new owner folds from the first chunk again, or from the
stored copy and on from its end. A session whose source is gone, or whose chunks end
without a terminal line, gets ``error{code:"session_lost"}`` (made by the core) as its
last chunk; one whose runner stopped answering for good (:class:`RunnerLostError`),
``error{code:"runner_lost"}``. A transient failure of the database or of Redis
(:func:`~sandstream.server.chat.store.is_transient`) while storing that chunk or settling
is retried with backoff for as long as the lease holds; one of the sweep, or of a move,
is logged and the next sweep tries again.
**Fencing**: a mover writes nothing more, and does not settle, once a renewal is refused,
``ttl`` passed since the last renewal that succeeded was sent, or a write was fenced off.
The mover counts its claims by result, its failed renewals and its takeovers, and
knows how far behind its source each session it moves is (:meth:`LogMover.lag`), for
its metrics (:mod:`.metrics`).
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import Final, Generic, Literal, Protocol, TypeVar, get_args

import trio

from sandstream.core import StreamProcessor
from sandstream.server.chat.model import (
    FencedError,
    RedisLeaseError,
    RunnerLostError,
    SourceError,
    SourceGoneError,
)
from sandstream.server.chat.store import Batch, MovedChunks, report_failure, retry_transient
from sandstream.server.sessions import RUNNER_LOST, terminal_state

from .lease import Lease
from .sources import OpenSessionRef, Passed, Source

__all__ = [
    "CLAIM_RESULTS",
    "SESSION_LOST",
    "ClaimResult",
    "Fold",
    "LiveSessions",
    "LogMover",
    "MoveOutcome",
    "NewFold",
    "OnProgress",
    "OnTerminal",
    "SourceFor",
]

log = logging.getLogger("sandstream.chat.mover")

SESSION_LOST: Final = "session_lost"
"""Error code of the terminal chunk the mover adds to a session it cannot read to its end."""

RELEASE_TIMEOUT: Final = 5.0
"""Seconds a release may take when moving ends (then the lease just expires)."""

ClaimResult = Literal["acquired", "held_elsewhere", "failed"]
"""How a claim of a session's lease ended: taken, held by another owner, or the lease
store could not be asked (it raised)."""
CLAIM_RESULTS: Final[tuple[ClaimResult, ...]] = get_args(ClaimResult)

MoveOutcome = Literal["moved", "held_elsewhere", "lease_lost"]
"""How :meth:`LogMover.move` ended: the session was moved to its end and settled;
another owner holds its lease; the lease was lost (or fenced off) while moving."""


class Fold(Protocol):
    """What a session's chunks are folded into while the mover follows it."""

    @property
    def needs_chunks(self) -> bool:
        """Whether :meth:`feed` wants the chunks (False: a fold made elsewhere, fed
        nothing; the mover then reads the chunks only to store a copy)."""
        ...

    def feed(self, data: bytes) -> None:
        """Take the next chunks (whole lines, in cursor order). Called in a worker
        thread, one call at a time."""
        ...


F = TypeVar("F", bound=Fold)

NewFold = Callable[[OpenSessionRef], F]
"""An empty fold for a session, made as its moving starts (again after a takeover)."""

OnTerminal = Callable[[OpenSessionRef, int, F], Awaitable[None]]
"""Called with the session, the lease generation and the fold once the terminal chunk
was folded (and stored, with ``keep_chunks``)."""

OnProgress = Callable[[OpenSessionRef, int, F], Awaitable[None]]
"""Called with the session, the lease generation and the fold after each batch was
folded (or, for a fold made elsewhere, passed), still under the lease."""

LiveSessions = Callable[[], Awaitable[Sequence[OpenSessionRef]]]
"""The sessions that should be moved (the chat's running turns)."""

SourceFor = Callable[[OpenSessionRef], Source]
"""The source a session's chunks are read from (:class:`~.sources.SessionSources`)."""


class _LeaseLost(Exception):
    """Internal: the lease ran out before a write."""


class _Holding:
    """One claimed session: its generation, until when the lease surely holds, where
    its chunks come from and how far they are moved."""

    def __init__(self, ref: OpenSessionRef, generation: int, deadline: float) -> None:
        self.ref = ref
        self.generation = generation
        self.deadline = deadline
        """trio time: the last successful claim or renewal was *sent* before ``deadline - ttl``."""
        self.lost = False
        self.source: Source | None = None
        self.moved = 0
        """The cursor of the last chunk moved (once the source is followed)."""
        self.last_line = b""
        """The last chunk moved."""


class LogMover(Generic[F]):
    """Moves open sessions' chunks under a lease; see the module docstring.

    ``sink`` holds the fences (and, with ``keep_chunks``, the copies of the chunks);
    ``owner_id`` names this replica in the leases (unique per process). Times are in
    seconds: ``heartbeat`` must be shorter than ``ttl`` (a third of it is a good value).
    ``on_terminal``, ``on_progress`` and ``open_sessions`` that raise are logged: the
    session is left for the next sweep.
    """

    def __init__(
        self,
        lease: Lease,
        sink: MovedChunks,
        sources: SourceFor,
        owner_id: str,
        *,
        open_sessions: LiveSessions,
        new_fold: NewFold[F],
        on_terminal: OnTerminal[F],
        on_progress: OnProgress[F] | None = None,
        keep_chunks: bool = False,
        ttl: float = 30.0,
        heartbeat: float = 10.0,
        sweep_interval: float = 5.0,
    ) -> None:
        for name, value in (
            ("ttl", ttl),
            ("heartbeat", heartbeat),
            ("sweep_interval", sweep_interval),
        ):
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {value}")
        if heartbeat >= ttl:
            raise ValueError(
                f"the heartbeat ({heartbeat} s) must be shorter than the ttl ({ttl} s)"
            )
        self.lease = lease
        self.sink = sink
        self.sources = sources
        self.owner_id = owner_id
        self.ttl = ttl
        self.heartbeat = heartbeat
        self.sweep_interval = sweep_interval
        self.keep_chunks = keep_chunks
        self._open_sessions = open_sessions
        self._new_fold = new_fold
        self._on_terminal = on_terminal
        self._on_progress = on_progress
        self._moving: set[str] = set()
        self._holding: dict[str, _Holding] = {}
        self._nursery: trio.Nursery | None = None
        self.claims: dict[ClaimResult, int] = dict.fromkeys(CLAIM_RESULTS, 0)
        """Claims of a session's lease since start, by result."""
        self.renew_failures = 0
        """Renewals refused, failed or timed out since start."""
        self.takeovers = 0
        """Claims of a session whose moving an earlier lease had begun (its owner died,
        stalled, failed or was stopped) since start."""

    @property
    def moving(self) -> frozenset[str]:
        """The ids of the sessions this mover is moving (or claiming) now."""
        return frozenset(self._moving)

    def lag(self) -> int:
        """Chunks its sources have published and it has not moved yet, summed over the
        sessions it moves. Never blocks."""
        total = 0
        for holding in self._holding.values():
            published = (
                None if holding.source is None else holding.source.published(holding.ref.session_id)
            )
            if published is not None and published > holding.moved:
                total += published - holding.moved
        return total

    # -- the sweep ------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sweep every ``sweep_interval`` s until cancelled, moving each open session
        in a task of its own. Cancellation: every move stops and releases its lease."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    await self.sweep()
                    await trio.sleep(self.sweep_interval)
            finally:
                self._nursery = None

    async def sweep(self) -> None:
        """Ask ``open_sessions()`` once and start moving those not moved yet (a move
        whose lease another replica holds ends at once)."""
        try:
            refs = await self._open_sessions()
        except Exception as exc:
            report_failure(log, "the log mover's sweep (listing the open sessions)", exc)
            return
        for ref in refs:
            self.claim_now(ref)

    def claim_now(self, ref: OpenSessionRef) -> bool:
        """Start moving ``ref`` now, without waiting for the sweep; False if this
        mover moves it already. Raises :class:`RuntimeError` unless :meth:`run` runs."""
        if self._nursery is None:
            raise RuntimeError("the log mover is not running")
        if ref.session_id in self._moving:
            return False
        self._moving.add(ref.session_id)
        self._nursery.start_soon(self._move_logged, ref)
        return True

    async def _move_logged(self, ref: OpenSessionRef) -> None:
        try:
            await self.move(ref)
        except (SourceError, RedisLeaseError, sqlite3.Error) as exc:  # no traceback: not a bug
            log.warning(
                "moving session %s failed (%r); the next sweep tries again", ref.session_id, exc
            )
        except Exception as exc:
            report_failure(log, f"moving session {ref.session_id} (the next sweep)", exc)
        finally:
            self._moving.discard(ref.session_id)

    # -- one session ----------------------------------------------------------------

    async def move(self, ref: OpenSessionRef) -> MoveOutcome:
        """Claim, move, settle and release one session: acquire the lease (None:
        another replica owns it) and raise the session's fence to the new generation;
        follow its source from the first chunk (with ``keep_chunks``: fold the stored
        copy, follow from its end and store each batch, one :meth:`MovedChunks.move`
        each), folding each batch (then ``on_progress``), the lease renewed every
        ``heartbeat`` s; after the terminal chunk call ``on_terminal(ref, generation,
        fold)``, still under the lease; release it.

        Raises what the source (:class:`~.sources.SourceRefusedError`), the sink
        (:class:`sqlite3.Error`, :class:`~sandstream.server.chat.model.ChunkGapError`), the lease,
        ``on_progress`` or ``on_terminal`` raise; the lease is released first.
        Cancellation: stops at once and releases the lease.
        """
        started = trio.current_time()
        try:
            generation = await self.lease.acquire(ref.session_id, self.owner_id, self.ttl)
        except Exception:
            self.claims["failed"] += 1
            raise
        if generation is None:
            self.claims["held_elsewhere"] += 1
            return "held_elsewhere"
        self.claims["acquired"] += 1
        holding = self._holding[ref.session_id] = _Holding(ref, generation, started + self.ttl)
        try:
            return await self._hold(holding)
        finally:
            del self._holding[ref.session_id]
            with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
                try:
                    await self.lease.release(ref.session_id, self.owner_id, generation)
                except Exception as exc:
                    log.warning("session %s: releasing the lease failed: %r", ref.session_id, exc)

    async def _hold(self, holding: _Holding) -> MoveOutcome:
        """Move and settle under the lease, the heartbeat beside it."""
        failure: list[Exception] = []
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as work:
                nursery.start_soon(self._keep, holding, work)
                try:
                    await self._move_and_settle(holding)
                except (FencedError, _LeaseLost) as exc:
                    log.warning("session %s: stopped moving: %s", holding.ref.session_id, exc)
                    holding.lost = True
                except Exception as exc:  # raised as itself below, not in an exception group
                    failure.append(exc)
            nursery.cancel_scope.cancel()
        if failure:
            raise failure[0]
        return "lease_lost" if holding.lost else "moved"

    async def _keep(self, holding: _Holding, work: trio.CancelScope) -> None:
        """The heartbeat: renew every ``heartbeat`` s; cancel ``work`` once the lease is
        lost (renewal refused, or none succeeded within the ttl)."""
        session_id = holding.ref.session_id
        while True:
            await trio.sleep(self.heartbeat)
            sent = trio.current_time()
            held = False
            with trio.move_on_at(holding.deadline):
                try:
                    held = await self.lease.renew(
                        session_id, self.owner_id, holding.generation, self.ttl
                    )
                    if held:
                        holding.deadline = sent + self.ttl
                    else:
                        self.renew_failures += 1
                        log.warning("session %s: the lease was lost", session_id)
                        break
                except Exception as exc:
                    log.warning("session %s: renewing the lease failed: %r", session_id, exc)
            if not held:
                self.renew_failures += 1  # it raised, or took past the lease's deadline
            if not held and trio.current_time() >= holding.deadline:
                log.warning("session %s: no renewal within the lease's ttl", session_id)
                break
        holding.lost = True
        work.cancel()

    async def _move_and_settle(self, holding: _Holding) -> None:
        ref, generation = holding.ref, holding.generation
        session_id = ref.session_id
        try:
            if await self.sink.fence(session_id, generation):
                self.takeovers += 1
        except FencedError as exc:
            log.warning(
                "session %s: the lease's generation %d is below the session's fence %d "
                "(an owner of a newer claim wrote); the next sweep claims again",
                session_id,
                generation,
                exc.fence,
            )
            raise
        fold = self._new_fold(ref)
        if self.keep_chunks:
            await self.sink.fold(session_id, lambda runs: _feed_all(fold, runs))
            stored = await self.sink.last_chunk(session_id)
            if stored is not None:
                holding.moved, holding.last_line = stored

        async def deliver(batch: Batch | Passed) -> None:
            if trio.current_time() >= holding.deadline:
                raise _LeaseLost(f"the lease of generation {generation} ran out")
            if isinstance(batch, Passed):
                holding.moved, holding.last_line = batch.last, batch.last_line
            else:
                if self.keep_chunks:
                    await self.sink.move(session_id, generation, batch)
                await trio.to_thread.run_sync(fold.feed, batch.data)
                if batch.count:
                    data = batch.data
                    last_line = data[data.rfind(b"\n", 0, -1) + 1 :]
                    holding.moved, holding.last_line = batch.last, last_line
            if self._on_progress is not None:
                await self._on_progress(ref, generation, fold)

        source = self.sources(ref)
        holding.source = source
        ended_code, ended_why = SESSION_LOST, "the session's chunks ended without a terminal line"
        try:
            chunks = self.keep_chunks or fold.needs_chunks
            await source.follow(session_id, holding.moved, deliver, chunks=chunks)
        except SourceGoneError as exc:
            if isinstance(exc, RunnerLostError):
                ended_code = RUNNER_LOST
            log.error("session %s: %s; its log ends as %s", session_id, exc, ended_code)
            ended_why = str(exc)
        if terminal_state(holding.last_line) is None:
            line = StreamProcessor("ndjson").fail(ended_code, ended_why)
            await retry_transient(
                partial(deliver, Batch(holding.moved + 1, line, 1)),
                f"session {session_id}: storing its last chunk",
                log,
            )
        await retry_transient(
            partial(self._on_terminal, ref, generation, fold),
            f"session {session_id}: settling its turn",
            log,
        )


def _feed_all(fold: Fold, runs: Iterable[bytes]) -> None:
    for run in runs:
        fold.feed(run)
