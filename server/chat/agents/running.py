"""Live Agents-block runs: what is in flight, and how each one settles exactly once.

A :class:`RelayedRun` is one ``POST /stream`` dispatch between its start and its settle:
its core :class:`~sandstream.core.StreamProcessor`, its :class:`~.upstream.Upstream`
and what to persist. :meth:`RelayedRun.finish` runs once however the run ends, shielded,
so a cancelled caller still persists; after :meth:`RelayedRun.end` (shutdown) a run that
settles without its terminal settles as ``error{code:"shutdown"}``.
:class:`AgentsRun` settles its session; :class:`RunningRuns` tracks them for shutdown.
(Chat turns are runner sessions, settled by :mod:`sandstream.server.chat.mover.settle`.)
"""

from __future__ import annotations

import logging
import sqlite3

import trio

from sandstream.core import StreamProcessor
from sandstream.server.chat.model import StoreError, now_ms
from sandstream.server.chat.store import DispatchStore

from .upstream import Upstream

__all__ = ["AgentsRun", "RelayedRun", "RunningRuns"]

log = logging.getLogger("sandstream.chat")


class RelayedRun:
    """One dispatch in flight. Subclasses say what a start frame and a settle are."""

    def __init__(self, *, session_id: str, processor: StreamProcessor, upstream: Upstream) -> None:
        self.session_id = session_id
        self.processor = processor
        self.upstream = upstream
        self.entered = False
        """True once the response body started (its nursery owns the turn from then)."""
        self.settled = trio.Event()
        self.ending = trio.Event()
        """Set by :meth:`end`: the server is shutting down, the turn must end now."""
        self.end_message = ""
        self._settling = False
        self._registry: RunningRuns | None = None

    async def _persist(self) -> None:
        """Write the settled turn (called once, shielded)."""

    def end(self, message: str) -> None:
        """End the turn early for shutdown: it ends with ``error{code:"shutdown"}``.

        The upstream is told to end; the response body (:mod:`.relay`), seeing
        :attr:`ending`, stops reading it at once so the container is reaped without
        waiting for the client. Idempotent.
        """
        if self.ending.is_set():
            return
        self.end_message = message
        self.ending.set()
        self.upstream.end("shutdown", message)

    def end_frames(self, reason: str = "the client disconnected") -> bytes:
        """End the processor's turn if it has not ended; return its terminal frames.

        After :meth:`end` it ends as ``shutdown``, otherwise as ``cancelled`` with
        ``reason``.
        """
        if self.processor.ended:
            return b""
        if self.ending.is_set():
            return self.processor.fail("shutdown", self.end_message)
        return self.processor.cancel(reason)

    async def finish(self, reason: str = "the client disconnected") -> None:
        """Persist the turn once; later calls wait for the first to finish.

        A turn whose stream has not ended is ended first (:meth:`end_frames`).
        Shielded from cancellation; a store failure is logged, never raised (the
        chat lock then expires with its lease).
        """
        if self._settling:
            with trio.CancelScope(shield=True):
                await self.settled.wait()
            return
        self._settling = True
        try:
            with trio.CancelScope(shield=True):
                self.end_frames(reason)
                try:
                    await self._persist()
                except (sqlite3.Error, StoreError, OSError):
                    log.exception("session %s: persisting the settled turn failed", self.session_id)
        finally:
            self.settled.set()
            if self._registry is not None:
                self._registry.discard(self)

    async def abandon(self) -> None:
        """Settle a turn whose response body never started (the client left first)."""
        if self.entered:
            return
        self.upstream.discard()
        await self.finish("the client went away before the stream started")


class AgentsRun(RelayedRun):
    """An Agents-block run: validated NDJSON out, the session settled at the end."""

    def __init__(
        self, *, store: DispatchStore, session_id: str, upstream: Upstream, max_line_bytes: int
    ) -> None:
        super().__init__(
            session_id=session_id,
            processor=StreamProcessor("ndjson", max_line_bytes=max_line_bytes),
            upstream=upstream,
        )
        self.store = store

    async def _persist(self) -> None:
        await self.store.close_dispatch(self.session_id, now=now_ms())


class RunningRuns:
    """The running Agents-block runs of one app, for :meth:`shutdown`."""

    def __init__(self) -> None:
        self._turns: set[RelayedRun] = set()
        self._changed = trio.Event()
        self.draining = False

    def __len__(self) -> int:
        return len(self._turns)

    def add(self, turn: RelayedRun) -> None:
        turn._registry = self
        self._turns.add(turn)

    def discard(self, turn: RelayedRun) -> None:
        self._turns.discard(turn)
        self._changed.set()
        self._changed = trio.Event()

    def turns(self) -> list[RelayedRun]:
        return list(self._turns)

    async def shutdown(self, timeout: float) -> None:
        """End every running run with ``error{code:"shutdown"}``; wait up to ``timeout``
        for them to settle (a turn whose body never starts is settled when its
        connection closes). Cancellation: stops waiting; the turns go on ending."""
        self.draining = True
        for turn in self.turns():
            turn.end("the server is shutting down")
        with trio.move_on_after(timeout):
            while self._turns:
                await self._changed.wait()
        if self._turns:
            log.error("shutdown: %d turn(s) did not settle in time", len(self._turns))
