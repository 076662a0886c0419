"""Who holds a chat's lock while its turn runs: the turn's keeper, not its HTTP response.

A :class:`TurnKeeper` is one task per live chat turn, in the chat service's nursery
(:class:`TurnKeepers`). It renews the chat's lock (:func:`~.lease.keep_lease`) until
the runner session has ended, then settles the turn from the session's chunks
(:class:`~.settle.TurnSettler`: the message written and the lock released in one
transaction) and sets :attr:`TurnKeeper.settled`. Clients come and go meanwhile: no
response holds anything.

- embedded session: waits until the session's last chunk is stored, then reads its
  chunks from the session buffer (no fold while the turn streams);
- remote session: follows the runner's stream to the terminal, keeping the chunks
  (the log mover will take this over), reconnecting when it breaks off.

A session the runner lost (:class:`~.runner_sessions.SessionGoneError`) is settled
with the chunks read so far, closed as ``upstream_closed``: its steps are kept.
Chunks that retention (``--session-retain-chunks``) dropped before the end are not
in the fold. Cancellation (a remote turn at shutdown): the keeper stops renewing; the turn keeps
running on its runner, and the next sweep after the lease expired (here or in
another process) adopts it (:meth:`~.service.ChatService.sweep`).
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Final

import trio

from .errors import StoreError
from .lease import keep_lease
from .models import TurnRecord
from .runner_sessions import (
    KEEPALIVE,
    EmbeddedSession,
    RunnerSession,
    SessionGoneError,
)
from .settle import TurnSettler
from .store import ChatStore

__all__ = ["TurnKeeper", "TurnKeepers"]

log = logging.getLogger("sandstream.chat")

_READ_BYTES: Final = 4 * 1024 * 1024
_IDLE: Final = 3600.0


class TurnKeeper:
    """The keeper of one turn (see the module docstring)."""

    def __init__(self, record: TurnRecord, session: RunnerSession, holder: str) -> None:
        self.record = record
        self.session = session
        self.holder = holder
        self.settled = trio.Event()
        self.cancel_scope = trio.CancelScope()

    @property
    def chat_id(self) -> str:
        return self.record.chat_id

    async def run(
        self, store: ChatStore, settler: TurnSettler, *, lease: float, heartbeat: float
    ) -> None:
        """Keep the lock until the session ended, then settle. Never raises for a store
        failure (logged: the lock then expires with its lease and a sweep adopts)."""
        with self.cancel_scope:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        lambda: keep_lease(
                            store, self.chat_id, self.holder, lease=lease, heartbeat=heartbeat
                        )
                    )
                    chunks = await self._chunks()
                    nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True):
                    await settler.settle(self.session.id, chunks)
            except (sqlite3.Error, StoreError, OSError):
                log.exception("chat %s: settling turn %s failed", self.chat_id, self.session.id)
            except Exception:  # a bug: this turn's lock expires, the server goes on
                log.exception("chat %s: keeping turn %s failed", self.chat_id, self.session.id)
            finally:
                self.settled.set()

    async def _chunks(self) -> list[bytes]:
        """Every chunk of the session once it has ended (or as far as it could be read)."""
        chunks: list[bytes] = []
        session = self.session
        if isinstance(session, EmbeddedSession):
            embedded = session.session
            while not embedded.ended:  # its last chunk is stored (the container may linger)
                await embedded.wait_beyond(embedded.last_cursor, _IDLE)
            cursor = embedded.first_cursor - 1  # retention may have dropped the first ones
            while batch := await embedded.read(cursor, _READ_BYTES):
                chunks += batch
                cursor += len(batch)
            return chunks
        try:
            async with session.reader(0, _IDLE) as reader:
                while (item := await reader.next()) is not None:
                    if item != KEEPALIVE:
                        assert not isinstance(item, str)
                        chunks += item.chunks
        except SessionGoneError as exc:
            log.error("chat %s: %s; settling with what was read", self.chat_id, exc)
        return chunks


class TurnKeepers:
    """The keepers of this process, by chat id; their tasks run in :meth:`run`'s nursery."""

    def __init__(
        self, store: ChatStore, settler: TurnSettler, *, lease: float, heartbeat: float
    ) -> None:
        self._store = store
        self._settler = settler
        self._lease = lease
        self._heartbeat = heartbeat
        self._keepers: dict[str, TurnKeeper] = {}
        self._nursery: trio.Nursery | None = None

    def __len__(self) -> int:
        return len(self._keepers)

    def get(self, chat_id: str) -> TurnKeeper | None:
        return self._keepers.get(chat_id)

    def keepers(self) -> list[TurnKeeper]:
        return list(self._keepers.values())

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the keepers' tasks until cancelled (then remote turns go on running on
        their runners, unsettled here: see the module docstring)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def keep(self, record: TurnRecord, session: RunnerSession, holder: str) -> TurnKeeper:
        """Start keeping a turn. Raises RuntimeError when :meth:`run` is not running."""
        if self._nursery is None:
            raise RuntimeError("the turn keepers are not running")
        keeper = TurnKeeper(record, session, holder)
        self._keepers[record.chat_id] = keeper
        self._nursery.start_soon(self._run, keeper)
        return keeper

    async def _run(self, keeper: TurnKeeper) -> None:
        try:
            await keeper.run(
                self._store, self._settler, lease=self._lease, heartbeat=self._heartbeat
            )
        finally:
            if self._keepers.get(keeper.chat_id) is keeper:
                del self._keepers[keeper.chat_id]
