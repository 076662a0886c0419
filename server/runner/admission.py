"""The runner service: admits turns against a capacity limit and shuts them all down.

:class:`Runner` is what both the HTTP route and an in-process caller use::

    turn = runner.open_turn(dispatch)  # raises AtCapacityError / ShuttingDownError
    async with turn:
        async for chunk in turn:
            ...

A slot is taken when the turn is admitted and given back when its container is gone
(a stalled client does not hold one). :meth:`Runner.shutdown` ends every running turn with
``error{code:"shutdown"}`` and returns once every container has been reaped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal, get_args

import msgspec
import trio

from sandstream.core import LIVE_EXTENSION, USAGE_EXTENSION, Dispatch, Mode, TokenBudget
from sandstream.server.gateway import ObserverFactory, gateway_keys

from .access_log import AccessLog
from .bwrap import BwrapLauncher, bwrap_available
from .errors import AtCapacityError, ShuttingDownError
from .launcher import ContainerLauncher, LocalSubprocessLauncher
from .metering import UsageMetering
from .pool import WarmPool, warm_launcher
from .settings import RunnerSettings
from .turn import END_GRACE, AccessRecord, TurnOutcome, TurnStream

__all__ = [
    "Runner",
    "default_launcher",
]

log = logging.getLogger("sandstream.runner")

TurnListener = Callable[[TurnStream, AccessRecord], object]


class _Extensions(msgspec.Struct):
    extensions: list[str] = msgspec.field(default_factory=list)


def _extensions(dispatch: Dispatch | bytes) -> tuple[str, ...]:
    """The envelope extensions ``dispatch`` asks for that the core knows (the dispatch
    is valid: the route decoded it, or this process made it)."""
    if isinstance(dispatch, bytes):
        asked = msgspec.json.decode(dispatch, type=_Extensions).extensions
    else:
        asked = dispatch.extensions
    return tuple(name for name in (LIVE_EXTENSION, USAGE_EXTENSION) if name in asked)


def default_launcher() -> ContainerLauncher:
    """The launcher a :class:`Runner` given none uses.

    A :class:`~.bwrap.BwrapLauncher` (default options) on Linux when ``bwrap`` is
    installed; otherwise a :class:`LocalSubprocessLauncher`, with a warning that its
    containers are not isolated.
    """
    if bwrap_available():
        return BwrapLauncher()
    log.warning(
        "no launcher given and bubblewrap is not installed: containers run as plain "
        "subprocesses with this process's user, files and network; they are NOT "
        "isolated and can outlive their turn (development only)"
    )
    return LocalSubprocessLauncher()


class Runner:
    """Admission, bookkeeping and shutdown for turns. One per server process.

    ``launcher`` defaults to :func:`default_launcher` (bubblewrap sandboxes where
    ``bwrap`` is installed). ``access_log`` gets one JSON record per turn (default:
    the ``sandstream.access`` logger).
    """

    def __init__(
        self,
        settings: RunnerSettings,
        launcher: ContainerLauncher | None = None,
        *,
        access_log: AccessLog | None = None,
    ) -> None:
        self.settings = settings
        self.launcher: ContainerLauncher = launcher or default_launcher()
        self.pool: WarmPool | None = None
        """The warm pool (``settings.warm_pool`` > 0, a launcher of the container
        command), once :meth:`WarmPool.serve` runs (the app's lifespan starts it)."""
        if settings.warm_pool:
            warm = warm_launcher(self.launcher)
            if warm is None:
                log.info("no warm pool: the container command is not sandstream's container")
            else:
                self.pool = WarmPool(warm, size=settings.warm_pool, ttl=settings.warm_ttl)
                self.launcher = self.pool
        self.access_log = access_log or AccessLog()
        self._holding: set[TurnStream] = set()
        self._open: set[TurnStream] = set()
        self._changed = trio.Event()
        self._listeners: list[TurnListener] = []
        self.draining = False
        """True once :meth:`shutdown` began: no turn is admitted any more."""
        self.admitted = 0
        """Turns admitted since start."""
        self.ended: dict[TurnOutcome, int] = dict.fromkeys(get_args(TurnOutcome), 0)
        """Turns closed since start, by outcome."""
        self.containers_started = 0
        """Containers that started since start (a launch that failed is not one)."""
        self._by_id: dict[str, TurnStream] = {}
        self.metering = UsageMetering(self._by_id.get)
        """Meters every model call of every turn's gateway (:mod:`.metering`)."""
        self.call_observers: list[ObserverFactory] = [self.metering]
        """Made an observer of every model call of every turn's gateway: the usage
        meter, and any factory added here."""

    # -- state ----------------------------------------------------------------------

    @property
    def live(self) -> int:
        """Containers running or about to (admitted turns whose container is not gone)."""
        return len(self._holding)

    @property
    def open_turns(self) -> int:
        """Turns admitted and not yet closed."""
        return len(self._open)

    def turns(self) -> list[TurnStream]:
        """Turns admitted and not yet closed."""
        return list(self._open)

    def add_listener(self, listener: TurnListener) -> None:
        """Call ``listener(turn, record)`` as each turn closes (after the access log)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: TurnListener) -> None:
        self._listeners.remove(listener)

    # -- admission ----------------------------------------------------------------

    def open_turn(
        self,
        dispatch: Dispatch | bytes,
        *,
        mode: Mode = "ndjson",
        turn_id: str | None = None,
        abort_client: Callable[[], object] | None = None,
        cancel_outcome: Literal["cancelled", "client_disconnected"] = "cancelled",
        messages: trio.MemoryReceiveChannel[bytes] | None = None,
    ) -> TurnStream:
        """Admit a turn and return it, not yet started: enter it with ``async with``.

        ``dispatch`` is a validated :class:`Dispatch` or its JSON. The slot is held
        from now until the turn's container is gone; a turn that is never entered
        must be :meth:`~TurnStream.discard`-ed to give it back. ``messages``: lines
        for the container's stdin after the dispatch (see :class:`TurnStream`).

        Raises :class:`AtCapacityError` when ``max_live`` containers run, and
        :class:`ShuttingDownError` during shutdown (both carry ``retry_after``).
        Never blocks.
        """
        retry_after = self.settings.retry_after
        if self.draining:
            raise ShuttingDownError("the runner is shutting down", retry_after)
        if len(self._holding) >= self.settings.max_live:
            raise AtCapacityError(
                f"{self.settings.max_live} containers are running, the maximum", retry_after
            )
        payload, keys, budget = self._take_keys(dispatch)
        turn = TurnStream(
            payload,
            launcher=self.launcher,
            settings=self.settings,
            turn_id=turn_id,
            mode=mode,
            cancel_outcome=cancel_outcome,
            abort_client=abort_client,
            on_container_started=self._container_started,
            on_container_gone=self._container_gone,
            on_closed=self._closed,
            messages=messages,
            extensions=_extensions(dispatch),
            provider_keys=keys,
            call_observers=self.call_observers,
            budget=budget,
            on_over_budget=self.metering.refused,
        )
        self._holding.add(turn)
        self._open.add(turn)
        self._by_id[turn.id] = turn
        self.admitted += 1
        return turn

    def _take_keys(
        self, dispatch: Dispatch | bytes
    ) -> tuple[bytes, dict[str, str] | None, TokenBudget | None]:
        """The dispatch JSON, without its provider variables when the turn gets a model
        gateway, the keys of that gateway (the dispatch's, else the runner's own) and
        the turn's token budget; ``None``: no gateway (none is run, or there is no
        key), the JSON unchanged, no budget (only a gateway sees the tokens)."""
        payload = dispatch if isinstance(dispatch, bytes) else msgspec.json.encode(dispatch)
        if not self.settings.model_gateway:
            return payload, None, None
        if isinstance(dispatch, bytes):
            dispatch = msgspec.json.decode(dispatch, type=Dispatch)
        keys = gateway_keys(dispatch.providers, self.settings.provider_env)
        if not keys:
            return payload, None, None
        stripped = msgspec.structs.replace(dispatch, providers={})
        return msgspec.json.encode(stripped), keys, dispatch.budget

    # -- shutdown -------------------------------------------------------------------

    async def shutdown(self, timeout: float | None = None) -> None:
        """End every turn with ``error{code:"shutdown"}``; return once all are closed.

        New turns are refused from the first call on. Running turns are ended at once
        (their containers are stopped while their stdout is drained: a bwrap sandbox
        is ``SIGKILL``-ed, a local one gets ``SIGTERM``, ``SIGKILL`` after the grace);
        a client still holding a chunk is cut off if it has not taken it within
        :data:`~.turn.END_GRACE`. Turns have ``timeout`` seconds (default
        ``settings.shutdown_timeout``) to deliver their last line; the connections of
        those that cannot are then cut, and they get ``timeout`` more seconds to
        close. Returns when every container is reaped (and, unless a write could not
        be freed, every turn closed), and the warm pool's sandboxes are gone. Idempotent.
        Cancellation: stops waiting; the turns carry on ending.
        """
        self.draining = True
        if timeout is None:
            timeout = self.settings.shutdown_timeout
        for turn in self.turns():
            turn.end("shutdown", "the runner is shutting down", client_grace=END_GRACE)
        if self._open:
            log.info("shutdown: ending %d running turn(s)", len(self._open))
        with trio.move_on_after(timeout):
            await self._wait(lambda: not self._open)
        for turn in self.turns():
            if turn.started:
                log.warning("shutdown: turn %s did not finish in time, cutting its client", turn.id)
                turn.abort_client()
            else:
                turn.discard()
        with trio.move_on_after(timeout):
            await self._wait(lambda: not self._open)
        if self._open:
            log.error(
                "shutdown: %d response(s) still blocked on their clients; "
                "their containers are stopped",
                len(self._open),
            )
        # Containers were stopped at the start; each is gone within its launcher's grace.
        await self._wait(lambda: not self._holding)
        if self.pool is not None:
            await self.pool.close()  # its unclaimed sandboxes are killed and gone

    # -- internals ------------------------------------------------------------------

    async def _wait(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _container_started(self, turn: TurnStream) -> None:
        self.containers_started += 1

    def _container_gone(self, turn: TurnStream) -> None:
        self._holding.discard(turn)
        self._notify()

    def _closed(self, turn: TurnStream, record: AccessRecord) -> None:
        self._holding.discard(turn)
        self._open.discard(turn)
        self._by_id.pop(turn.id, None)
        self.ended[record.outcome] += 1
        self.access_log.write(record)
        for listener in list(self._listeners):
            try:
                listener(turn, record)
            except Exception:
                log.exception("turn listener %r failed", listener)
        self._notify()
