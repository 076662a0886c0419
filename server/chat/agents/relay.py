"""The streaming response of an Agents-block run: runner NDJSON → the core → the client,
one nursery (a chat turn is a runner session instead: :mod:`..turns.viewer`).

:class:`RelayBody` is the Quart response body: ``__aenter__`` starts the pump (the
upstream read) and the stall watchdog in its nursery, ``__anext__`` feeds the pump's
chunks to the core (``: ping`` when idle), ``__aexit__`` closes the nursery, shielded.
The run is settled before its terminal goes out.

Cancellation (the client leaving) cancels the pump, which stops the container, and the
run settles as cancelled. Shutdown (:meth:`~.running.RelayedRun.end`) ends it at once with
``error{code:"shutdown"}``; a client that does not take its last chunk within
``end_grace`` is cut off (docs/architecture.md, "Agents-block runs").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Final

import trio
from quart.wrappers.response import ResponseBody

from sandstream.server.http import ClientWatch
from sandstream.server.runner import END_GRACE

from .running import RelayedRun
from .upstream import UpstreamEnd

__all__ = ["END_GRACE", "FINISH_GRACE", "RelayBody"]

log = logging.getLogger("sandstream.chat")

FINISH_GRACE: Final = 10.0
"""After the terminal, how long the runner side may take to wind down by itself."""


class RelayBody(ResponseBody):
    """The response body of one Agents-block run (see the module docstring).

    ``ping_interval``: idle time before a ``: ping`` (``None``: never, for NDJSON).
    ``stall_timeout``: a chunk not taken by the client for this long ends the turn
    and cuts the connection with ``abort_client`` (``None``: never). ``end_grace``:
    on shutdown, how long a chunk may stay in the client's hands before that.
    """

    def __init__(
        self,
        turn: RelayedRun,
        *,
        ping_interval: float | None,
        stall_timeout: float | None,
        abort_client: Callable[[], object] | None = None,
        finish_grace: float = FINISH_GRACE,
        end_grace: float = END_GRACE,
    ) -> None:
        self.turn = turn
        self._ping_interval = ping_interval
        self._stall_timeout = stall_timeout
        self._finish_grace = finish_grace
        self._end_grace = end_grace
        self._pump_scope = trio.CancelScope()
        self._manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None
        self._receive: trio.MemoryReceiveChannel[bytes] | None = None
        self._upstream_end: UpstreamEnd | None = None
        self._pump_done = trio.Event()
        self._pending = b""
        self._finished = False
        self._last_out = 0.0
        self.client = ClientWatch(abort_client)

    # -- context manager -------------------------------------------------------------

    async def __aenter__(self) -> RelayBody:
        """Open the nursery; start the pump, the background work and the watchdog."""
        turn = self.turn
        turn.entered = True
        self._last_out = trio.current_time()
        if turn.settled.is_set():  # abandoned before the body started (shutdown)
            self._finished = True
            return self
        self._manager = trio.open_nursery()
        nursery = await self._manager.__aenter__()
        self._nursery = nursery
        send, self._receive = trio.open_memory_channel[bytes](0)
        nursery.start_soon(self._pump, send)
        nursery.start_soon(self._end_on_shutdown)
        if self._stall_timeout is not None:
            watch = self.client.watch
            nursery.start_soon(watch, self._stall_timeout, nursery.cancel_scope, turn.session_id)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the nursery (shielded), then settle the turn if it has not settled.

        After a normal end the runner side gets ``finish_grace`` seconds to wind down
        by itself (the container exits after its terminal line); otherwise (the
        client left) it is torn down at once. Never suppresses the exception.
        """
        try:
            if self._manager is not None and self._nursery is not None:
                if exc_type is None and self._finished:
                    with trio.CancelScope(shield=True) as grace:
                        grace.deadline = trio.current_time() + self._finish_grace
                        await self._pump_done.wait()
                # The nursery's own scope, shielded: a cancelled caller still waits
                # until the pump (and so the container) is gone.
                scope = self._nursery.cancel_scope
                scope.shield = True
                scope.cancel()
                await self._manager.__aexit__(None, None, None)
        finally:
            reason = (
                f"the client did not read for {self._stall_timeout:g} s"
                if self.client.stalled
                else "the client disconnected"
            )
            await self.turn.finish(reason)

    # -- iteration ----------------------------------------------------------------------

    def __aiter__(self) -> RelayBody:
        return self

    async def __anext__(self) -> bytes:
        """The next frames: start, core output, a ping, or the terminal frames.

        Cancellation-safe (a chunk taken from the channel is fed before any later
        checkpoint; the pending start frame stays pending).
        """
        self.client.taken()
        if self._pending:
            out, self._pending = self._pending, b""
            return self._hand_out(out)
        processor = self.turn.processor
        receive = self._receive
        while not self._finished and receive is not None:
            deadline = (
                self._last_out + self._ping_interval
                if self._ping_interval is not None
                else float("inf")
            )
            chunk: bytes | None = None
            with trio.move_on_at(deadline) as idle:
                try:
                    chunk = await receive.receive()
                except trio.EndOfChannel:
                    chunk = None
            if idle.cancelled_caught:
                return self._hand_out(processor.ping())
            if chunk is None:  # the pump returned: its outcome is set
                end = self._upstream_end
                out = processor.fail(end.code, end.message) if end else processor.close()
            else:
                out = processor.feed(chunk)
            if processor.ended:
                self._finished = True
                await self.turn.finish()
            if out:
                return self._hand_out(out)
        raise StopAsyncIteration

    def _hand_out(self, out: bytes) -> bytes:
        now = trio.current_time()
        self._last_out = now
        self.client.handed_out(now)
        return out

    # -- tasks -----------------------------------------------------------------------------

    async def _pump(self, send: trio.MemorySendChannel[bytes]) -> None:
        async with send:
            try:
                with self._pump_scope:
                    self._upstream_end = await self.turn.upstream.pump(send)
                if self._pump_scope.cancelled_caught:  # shutdown
                    self._upstream_end = UpstreamEnd("shutdown", self.turn.end_message)
            except Exception as exc:  # a bug: the turn still ends with one terminal
                log.exception("session %s: the upstream failed", self.turn.session_id)
                self._upstream_end = UpstreamEnd("internal_error", f"the upstream failed: {exc!r}")
            finally:
                self._pump_done.set()

    async def _end_on_shutdown(self) -> None:
        """On :attr:`~.running.RelayedRun.ending`: stop the pump, then end the turn even if
        the client is not reading (see the module docstring)."""
        await self.turn.ending.wait()
        self._pump_scope.cancel()
        await self._pump_done.wait()
        if self.client.sending_since is None:
            return  # __anext__ is waiting for the pump: it ends the turn and says so
        # A chunk is in the client's hands: settle now; the frames wait behind it.
        self._pending += self.turn.end_frames()
        self._finished = True
        await self.turn.finish()
        await trio.sleep(self._end_grace)  # the body's end cancels this
        log.warning(
            "session %s: the client did not take its last chunk at shutdown; cutting it off",
            self.turn.session_id,
        )
        self.client.cut()
