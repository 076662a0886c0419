"""The chat's log mover: each running chat turn's session followed by exactly one replica,
and the turn settled from its chunks by that replica, under its fenced lease.

:class:`TurnMover` runs one :class:`~sandstream.server.chat.mover.LogMover` per process: its live
sessions are the running ``chat_turns`` (every remote turn, and the embedded turns this process's
runner has); it folds each session's chunks into a :class:`~sandstream.server.chat.mover.TurnFold`
as they come (a copy of them is stored only with ``keep_chunks``) and at the terminal settles the
turn (:meth:`TurnSettler.settle`, fenced by the generation); after each batch it records the
chat's grants of the permission requests the fold has news of answered ``always`` (so a turn
that is lost keeps them), and with push on their alerts (fenced too); its lease is
wrapped in :class:`LockKeepingLease`, so the lease's owner holds and renews the chat's lock. A turn
started here is claimed at once (:meth:`TurnMover.claim_now`), the sweep claims the rest.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import Protocol

import psycopg
import trio

from sandstream.core import permission_block
from sandstream.server.chat.config import ChatSettings
from sandstream.server.chat.model import SourceGoneError, StoreError, TurnRecord, now_ms
from sandstream.server.chat.mover import (
    Lease,
    LogMover,
    OpenSessionRef,
    Passed,
    SessionSources,
    TurnFold,
    TurnSettler,
    open_lease,
)
from sandstream.server.chat.store import (
    TRANSIENT_TYPES,
    Batch,
    GrantStore,
    LogMoverTables,
    PushAlertStore,
    TurnStore,
)
from sandstream.server.sessions import SessionNotFoundError, SessionService

__all__ = ["LockKeepingLease", "TurnMover", "TurnMoverStore"]

log = logging.getLogger("sandstream.chat")

_POLL: float = 0.05
"""Seconds between looks at the store while a turn another replica moves settles."""


class TurnMoverStore(TurnStore, GrantStore, PushAlertStore, LogMoverTables, Protocol):
    """What :class:`TurnMover` uses of the chat store: the turns, the grants and the
    permission alerts it records, and the log mover's tables."""


class LockKeepingLease:
    """A :class:`~sandstream.server.chat.mover.Lease` that also holds the chat lock of the session's
    turn: each successful acquire and renew makes the owner its holder for ``lock_lease`` more
    seconds. A failed lock write (the database away or busy) is logged and the lease is
    still held: the lock is written again at the next renewal."""

    def __init__(self, lease: Lease, store: TurnStore, *, lock_lease: float) -> None:
        self.lease = lease
        self.store = store
        self.lock_lease = lock_lease

    async def acquire(self, session_id: str, owner: str, ttl: float) -> int | None:
        generation = await self.lease.acquire(session_id, owner, ttl)
        if generation is not None:
            await self._hold_lock(session_id, owner)
        return generation

    async def renew(self, session_id: str, owner: str, generation: int, ttl: float) -> bool:
        held = await self.lease.renew(session_id, owner, generation, ttl)
        if held:
            await self._hold_lock(session_id, owner)
        return held

    async def release(self, session_id: str, owner: str, generation: int) -> None:
        await self.lease.release(session_id, owner, generation)

    async def _hold_lock(self, session_id: str, owner: str) -> None:
        expires_at = now_ms() + int(self.lock_lease * 1000)
        try:
            await self.store.hold_turn_lock(session_id, f"{owner}:{session_id}", expires_at)
        except (*TRANSIENT_TYPES, sqlite3.Error, StoreError) as exc:  # the lease still holds
            log.warning("session %s: renewing its chat's lock failed: %r", session_id, exc)


class TurnMover:
    """This process's log mover for chat turns (see the module docstring).

    ``owner_id`` names this replica in the leases. :meth:`run` must run (in the chat
    service's nursery) for :meth:`claim_now` to work.
    """

    def __init__(
        self, settings: ChatSettings, store: TurnMoverStore, settler: TurnSettler, owner_id: str
    ) -> None:
        self.settings = settings
        self.store = store
        self.settler = settler
        self.owner_id = owner_id
        self.sink = store.moved_chunks
        self._embedded: SessionService | None = None
        self._mover: LogMover[TurnFold] | None = None
        self._sources = SessionSources()
        self._settled: dict[str, trio.Event] = {}
        self._lease: Lease | None = None

    @property
    def lease(self) -> Lease | None:
        """The lease store the log mover claims sessions in (Redis's or the chat
        database's), while :meth:`run` runs."""
        return self._lease

    @property
    def log_mover(self) -> LogMover[TurnFold] | None:
        """The log mover, while :meth:`run` runs."""
        return self._mover

    @property
    def moving(self) -> frozenset[str]:
        """The runner session ids this replica moves now."""
        return frozenset() if self._mover is None else self._mover.moving

    async def run(
        self,
        embedded: SessionService | None,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Open the lease and move sessions until cancelled (then every lease held is
        released, so another replica takes over without waiting out the ttl).
        ``embedded``: this process's session service, if it runs turns itself.
        Raises :class:`ValueError` for a malformed Redis URL."""
        settings = self.settings
        self._embedded = embedded
        async with open_lease(settings.redis_url, self.store.lease.db) as lease:
            self._lease = lease
            self._sources = SessionSources(
                embedded=embedded,
                runner_token=settings.runner_token,
                runner_lost_after=settings.runner_lost_timeout,
            )
            self._mover = LogMover(
                LockKeepingLease(lease, self.store, lock_lease=settings.lock_lease),
                self.sink,
                self._sources,
                self.owner_id,
                open_sessions=self._open_sessions,
                new_fold=self._new_fold,
                on_terminal=self._on_terminal,
                on_progress=self._on_progress,
                keep_chunks=settings.keep_chunks,
                ttl=settings.lease_ttl,
                heartbeat=settings.lock_heartbeat,
                sweep_interval=settings.lock_heartbeat,
            )
            try:
                await self._mover.run(task_status=task_status)
            finally:
                self._mover = None
                self._lease = None

    def claim_now(self, record: TurnRecord) -> None:
        """Start moving the session of a turn just started here. Raises
        :class:`RuntimeError` unless :meth:`run` runs."""
        if self._mover is None:
            raise RuntimeError("the log mover is not running")
        assert record.session_id is not None
        self._mover.claim_now(OpenSessionRef(record.session_id, record.runner_url))

    def embedded_here(self, session_id: str) -> bool:
        """Whether ``session_id`` is a session of this process's embedded runner."""
        if self._embedded is None:
            return False
        try:
            self._embedded.get(session_id)
        except SessionNotFoundError:
            return False
        return True

    async def wait_settled(self, session_id: str, timeout: float) -> bool:
        """Wait up to ``timeout`` s until the turn of ``session_id`` has settled (here,
        or by the replica that moves it); False if it has not (or the database did not
        answer meanwhile)."""
        event = self._settled.setdefault(session_id, trio.Event())
        with trio.move_on_after(timeout):
            while True:
                try:
                    turn = await self.store.get_turn(session_id)
                except TRANSIENT_TYPES as exc:
                    log.info("session %s: its turn's state is not read now: %r", session_id, exc)
                else:
                    if turn is None or turn.state == "settled":
                        self._settled.pop(session_id, None)
                        return True
                with trio.move_on_after(_POLL):
                    await event.wait()
        return False

    def _new_fold(self, ref: OpenSessionRef) -> TurnFold:
        """The runner's own fold for a session this process runs from its start (still
        running: its core is there), else a new one."""
        runner = None
        if ref.runner_url is None and self._embedded is not None:
            try:
                stream = self._embedded.get(ref.session_id).turn
            except SessionNotFoundError:
                stream = None
            runner = None if stream is None else stream.processor
        return self.settler.new_fold(runner)

    async def _fold_stored(self, ref: OpenSessionRef, shared: TurnFold) -> TurnFold:
        """A new fold of the session's chunks, read from its first (``shared`` if they
        are no longer all there)."""
        fold = self.settler.new_fold()

        async def deliver(batch: Batch | Passed) -> None:
            assert isinstance(batch, Batch)  # chunks asked for
            await trio.to_thread.run_sync(fold.feed, batch.data)

        try:
            await self._sources(ref).follow(ref.session_id, 0, deliver)
        except SourceGoneError as exc:
            log.warning("session %s: folding it again failed (%s)", ref.session_id, exc)
            return shared
        return fold

    async def _open_sessions(self) -> Sequence[OpenSessionRef]:
        return [
            OpenSessionRef(turn.session_id, turn.runner_url)
            for turn in await self.store.running_turns()
            if turn.session_id is not None
            and (turn.runner_url is not None or self.embedded_here(turn.session_id))
        ]

    async def _on_progress(self, ref: OpenSessionRef, generation: int, fold: TurnFold) -> None:
        """Record what the fold has news of about its permission requests, fenced by
        ``generation``: the chat's grants of those answered ``always``, and with push
        on their alerts; a failed write is logged and both are tried again after the
        next batch (a fenced one ends the moving)."""
        news = fold.watch.news(fold.permissions)
        if news is None:
            return
        permissions = fold.permissions
        answered = [permission_block(permissions[i], ended=False) for i in news.resolved]
        try:
            if answered:
                await self.store.record_turn_grants(
                    ref.session_id, generation=generation, answered=answered, now=now_ms()
                )
            if self.settings.push.enabled:
                await self.store.record_permission_news(
                    ref.session_id,
                    generation=generation,
                    asked=news.newest,
                    resolved=news.resolved,
                    now=now_ms(),
                )
        except (sqlite3.Error, psycopg.Error, StoreError) as exc:
            log.warning("session %s: recording its permission news failed: %r", ref.session_id, exc)
            return
        fold.watch.reported(news)

    async def _on_terminal(self, ref: OpenSessionRef, generation: int, fold: TurnFold) -> None:
        """Settle the turn with ``fold``'s message, fenced by ``generation``. A shared
        fold that did not see the session's end (its runner stopped before its core
        made one: the session's last chunk was added after it) is replaced by a fold
        of the session's chunks."""
        if fold.shared and not fold.ended:
            fold = await self._fold_stored(ref, fold)
        await self.settler.settle(ref.session_id, fold, generation=generation)
        event = self._settled.pop(ref.session_id, None)
        if event is not None:
            event.set()
