"""The SSE response of a chat turn: its runner session's chunks, from a cursor, as frames.

:class:`TurnStreamBody` is one viewer (the ``POST`` that started the turn, or a join): a
Quart response body that reads the session after a cursor (:mod:`.runner_link`) and
renders frames (:mod:`.frames`): ``start`` from the beginning, the session's frames,
then, once the turn has settled, the ``files``, the terminal and ``done``; ``: ping``
when quiet for ``ping_interval``. The turn itself is never touched.

The pending permission requests a viewer hands out, written by its task or live, are
passed to ``on_asked`` once written (a device saw them: their push alerts push
nobody); a live run that holds one sends the viewer's task on to do that.

Cancellation: a viewer that leaves (closed, or cut after ``stall_timeout`` s without
taking a chunk) ends only its body; with ``onDisconnect: "cancel"`` it first interrupts
the session, shielded. :meth:`~TurnStreamBody.close` (shutdown) ends it without a terminal.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from types import TracebackType
from typing import Any, Final

import trio
from quart.wrappers.response import ResponseBody

from sandstream.core import PING
from sandstream.server.chat.model import RunnerSessionGoneError
from sandstream.server.http import (
    ClientWatch,
    LiveConnection,
    Offered,
    Run,
    RunFraming,
    live_connection,
)
from sandstream.server.sessions import Subscribe

from .frames import TurnFrames, done_frame, files_frame, start_frame
from .runner_link import KEEPALIVE, RunnerSession, SessionReader

__all__ = ["OnAsked", "TurnStreamBody", "Viewers"]

log = logging.getLogger("sandstream.chat")

END_WAIT: Final = 30.0
"""Seconds a viewer that leaves with ``onDisconnect: "cancel"`` waits for the interrupt."""

OnAsked = Callable[[list[str]], Awaitable[None]]
"""Told the ids of the pending permission requests a viewer has written to its client."""


class _LiveFraming(RunFraming[Run]):
    """A caught-up viewer's live writes, framed once per run for every viewer: the
    run's frames, and in :attr:`asked` the pending permission requests among them."""

    __slots__ = ("asked",)

    def __init__(self) -> None:
        super().__init__(self._render)
        self.asked: list[str] = []

    def _render(self, run: Run) -> bytes:
        frames = TurnFrames()
        out = frames.render_run(run.first, run.data, run.count)
        self.asked = frames.asked
        return out


_LIVE: Final = _LiveFraming()


class _AskWatch:
    """A viewer's live subscriber: its connection, noting the permission requests it
    wrote; a run that holds one is refused once offered (written or queued), so the
    viewer's task reads on (after it has passed them on)."""

    __slots__ = ("_connection", "asked")

    def __init__(self, connection: LiveConnection[Run]) -> None:
        self._connection = connection
        self.asked: list[str] = []

    def offer(self, run: Run) -> Offered:
        offered = self._connection.offer(run)
        if _LIVE.run is not run or not _LIVE.asked:
            return offered
        self.asked += _LIVE.asked
        return "refused"

    @property
    def queued(self) -> int:
        return self._connection.queued

    async def write_backlog(self) -> None:
        await self._connection.write_backlog()


class Viewers:
    """The open viewer bodies of one app (for shutdown)."""

    def __init__(self) -> None:
        self._bodies: set[TurnStreamBody] = set()
        self._changed = trio.Event()

    def __len__(self) -> int:
        return len(self._bodies)

    def bodies(self) -> list[TurnStreamBody]:
        return list(self._bodies)

    def add(self, body: TurnStreamBody) -> None:
        self._bodies.add(body)

    def discard(self, body: TurnStreamBody) -> None:
        self._bodies.discard(body)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until_none(self, which: Callable[[TurnStreamBody], bool]) -> None:
        """Return once no open body satisfies ``which``."""
        while any(which(body) for body in self._bodies):
            await self._changed.wait()


class TurnStreamBody(ResponseBody):
    """One viewer of a turn (see the module docstring).

    ``after``: the cursor to resume after (``None``: from the beginning, ``start``
    included). ``at_terminal``: called when the terminal is read; waits for the turn
    to settle and returns the files the run wrote back. ``live_scope``: the ASGI
    scope of the response, for an embedded session's new runs to be written to its
    connection as step frames while this viewer is caught up (no task step per run:
    :mod:`sandstream.server.http.fanout`); ``None``: no live writes. ``on_asked``:
    told the pending permission requests this viewer wrote (see the module docstring).
    """

    def __init__(
        self,
        session: RunnerSession,
        *,
        after: int | None,
        start: Mapping[str, Any],
        at_terminal: Callable[[], Awaitable[list[Any]]],
        ping_interval: float,
        stall_timeout: float | None,
        abort_client: Callable[[], object] | None = None,
        live_scope: Mapping[str, Any] | None = None,
        interrupt_on_disconnect: bool = False,
        registry: Viewers | None = None,
        on_asked: OnAsked | None = None,
    ) -> None:
        self.session = session
        self._after = after if after is not None else 0
        self._pending = b"" if after is not None else start_frame(start)
        self._at_terminal = at_terminal
        self._ping_interval = ping_interval
        self._stall_timeout = stall_timeout
        self._interrupt = interrupt_on_disconnect
        self._registry = registry
        self._frames = TurnFrames()
        self._finished = False
        self._reader: SessionReader | None = None
        self._stack = AsyncExitStack()
        self._nursery: trio.Nursery | None = None
        self.client = ClientWatch(abort_client)
        self._on_asked = on_asked
        self._live_scope = live_scope
        self._subscribe: Subscribe | None = None
        if live_scope is not None:  # with no one to tell, the connection itself takes runs
            plain = partial(live_connection, live_scope, _LIVE, self.client)
            self._subscribe = plain if on_asked is None else self._live

    async def __aenter__(self) -> TurnStreamBody:
        stack = self._stack
        await stack.__aenter__()
        try:
            self._nursery = await stack.enter_async_context(trio.open_nursery())
            self._reader = await stack.enter_async_context(
                self.session.reader(self._after, self._ping_interval, self._subscribe)
            )
            if self._stall_timeout is not None:
                scope = self._nursery.cancel_scope
                self._nursery.start_soon(
                    self.client.watch, self._stall_timeout, scope, self.session.id
                )
        except BaseException as exc:
            await stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        if self._registry is not None:
            self._registry.add(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._registry is not None:
            self._registry.discard(self)
        if self._nursery is not None:
            # The nursery's own scope, shielded: its tasks end by this cancel alone,
            # not by the caller's (Quart cancels the request's scope when it is done).
            self._nursery.cancel_scope.shield = True
            self._nursery.cancel_scope.cancel()
        try:
            await self._stack.__aexit__(exc_type, exc_value, tb)
        finally:
            if self._interrupt and not self._finished:
                # Shielded, but bounded: a server torn down meanwhile must not hang here.
                with trio.CancelScope(shield=True, deadline=trio.current_time() + END_WAIT):
                    await self._interrupt_session()

    async def _interrupt_session(self) -> None:
        log.info("session %s: its client left (onDisconnect: cancel)", self.session.id)
        try:
            await self.session.interrupt()
        except (RunnerSessionGoneError, OSError) as exc:
            log.warning("session %s: interrupting it failed: %r", self.session.id, exc)

    def close(self) -> None:
        """End this viewer's body now (shutdown); its client resumes elsewhere. The
        connection is cut too: a client that stopped reading holds a write forever."""
        self.client.cut()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    @asynccontextmanager
    async def _live(self) -> AsyncIterator[_AskWatch | None]:
        """One wait's live subscriber; then the permission requests it wrote are passed on."""
        assert self._live_scope is not None and self._on_asked is not None
        async with live_connection(self._live_scope, _LIVE, self.client) as connection:
            watch = None if connection is None else _AskWatch(connection)
            yield watch
        if watch is not None and watch.asked:
            await self._on_asked(watch.asked)

    def __aiter__(self) -> TurnStreamBody:
        return self

    async def __anext__(self) -> bytes:
        self.client.taken()
        frames = self._frames
        if frames.asked:  # the frames handed out last were written: pass their requests on
            asked, frames.asked = frames.asked, []
            if self._on_asked is not None:
                await self._on_asked(asked)
        if self._pending:
            out, self._pending = self._pending, b""
            return self._hand_out(out)
        reader = self._reader
        while not self._finished and reader is not None:
            if frames.terminal is not None:  # its steps went out: settle, then the end
                self._finished = True
                files = await self._at_terminal()
                out = (files_frame(files) if files else b"") + frames.terminal_frame
                return self._hand_out(out + done_frame(frames.terminal, frames.terminal_cursor))
            item = await reader.next()
            if item is None:
                self._finished = True
                break
            if item == KEEPALIVE:
                return self._hand_out(PING)
            assert not isinstance(item, str)
            out = frames.render_run(item.first, item.data, item.count)
            if out:
                return self._hand_out(out)
        raise StopAsyncIteration

    def _hand_out(self, out: bytes) -> bytes:
        self.client.handed_out(trio.current_time())
        return out
