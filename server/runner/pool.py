"""The warm pool: sandboxes started ahead of turns, each claimed by one turn.

:class:`WarmPool` is a :class:`~.launcher.ContainerLauncher` over a
:class:`~.launcher.WarmLauncher`. :meth:`WarmPool.serve` (a task of the server's
lifetime) keeps up to ``size`` sandboxes started with the container's warm flag: the
sandbox, its namespaces and the container with its imports done, which said
:data:`~sandstream.core.WARM_READY` and waits. :meth:`WarmPool.run` gives a turn the
oldest of them: the turn's :class:`~.binding.Claim` goes through its
:class:`~.binding.Binding` (a bwrap sandbox's network gets the turn's ports then), and
the container reads the turn's environment and dispatch as a cold one reads its
dispatch. A claimed sandbox serves that turn alone and ends with it; a pool found empty
(or a claim that cannot be bound) starts the turn cold, as without a pool.

Refill: one sandbox at a time, none while more than :data:`MAX_STARTING` turns are
starting (their starts come first), a failed start retried after a backoff that doubles
up to :data:`MAX_BACKOFF` s. A sandbox unclaimed for ``ttl`` s is ended and replaced.

Cancellation: of :meth:`run`, as :meth:`~.launcher.ContainerLauncher.run` (the claimed
sandbox is stopped and gone before it returns); of :meth:`serve` (or :meth:`close`), every
unclaimed sandbox is killed and gone before it returns, and claimed ones are left to
their turns, which it waits for.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Final

import trio

from sandstream.core import WARM_READY

from .binding import Binding, Claim
from .bwrap import BwrapLauncher
from .errors import LaunchError
from .launcher import (
    ContainerExit,
    ContainerHandle,
    ContainerLauncher,
    LocalSubprocessLauncher,
    WarmLauncher,
    is_container_command,
)

__all__ = ["MAX_BACKOFF", "MAX_STARTING", "READY_TIMEOUT", "WarmPool", "warm_launcher"]

MAX_STARTING: Final = 2
"""No refill while more turns than this are starting."""
READY_TIMEOUT: Final = 60.0
"""Seconds a warm container has to say it is ready before it counts as failed."""
MAX_BACKOFF: Final = 60.0
"""The longest pause between failed warm starts (the first: one second)."""

log = logging.getLogger("sandstream.runner")


def warm_launcher(launcher: ContainerLauncher) -> WarmLauncher | None:
    """``launcher`` if it can start warm sandboxes: a local or bwrap launcher of the
    container command (another command knows no warm flag); else ``None``."""
    if isinstance(launcher, LocalSubprocessLauncher | BwrapLauncher) and is_container_command(
        launcher.argv
    ):
        return launcher
    return None


@dataclass(eq=False)
class _Warm:
    """One sandbox of the pool, from its start until it is gone."""

    id: str
    binding: Binding = field(default_factory=lambda: Binding(warm=True))
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    """Ends it; shielded once claimed (then the turn, not the pool, ends it)."""
    handle: ContainerHandle | None = None
    ready: bool = False
    settled: trio.Event = field(default_factory=trio.Event)
    """Set once it is ready, or gone without being ready."""
    gone: trio.Event = field(default_factory=trio.Event)


class _StartStatus:
    """The turn's ``task_status``, counting the turn as starting until it is called."""

    def __init__(self, pool: WarmPool, status: trio.TaskStatus[ContainerHandle]) -> None:
        self._pool = pool
        self._status = status
        self._counted = True
        pool.starting += 1

    def started(self, value: ContainerHandle | None = None) -> None:
        assert value is not None, "a launcher hands over its container"
        self.settle()
        self._status.started(value)

    def settle(self) -> None:
        if self._counted:
            self._counted = False
            self._pool.starting -= 1
            self._pool._notify()


class WarmPool:
    """Warm sandboxes of ``launcher``, at most ``size`` unclaimed, each recycled after
    ``ttl`` s unclaimed. See the module docstring. The counters are for /metrics."""

    def __init__(self, launcher: WarmLauncher, *, size: int, ttl: float) -> None:
        if size < 1:
            raise ValueError(f"a warm pool holds at least 1 sandbox, got {size}")
        if not ttl > 0:
            raise ValueError(f"ttl must be > 0, got {ttl}")
        self.launcher = launcher
        self.size = size
        self.ttl = ttl
        self._idle: deque[_Warm] = deque()
        self._changed = trio.Event()
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()
        self.starting = 0
        """Turns whose container is starting (claimed or cold)."""
        self.filling = 0
        """Warm sandboxes starting (0 or 1)."""
        self.in_use = 0
        """Claimed sandboxes not yet gone."""
        self.started = 0
        """Warm sandboxes started (ready or not)."""
        self.claimed = 0
        """Turns that got a warm sandbox."""
        self.recycled = 0
        """Warm sandboxes ended unclaimed after ``ttl``."""
        self.misses = 0
        """Turns that found the pool empty (or their claim unbound) and started cold."""
        self.failed = 0
        """Warm starts that failed (no sandbox, or it never said ready)."""

    @property
    def warm(self) -> int:
        """Unclaimed sandboxes ready for a turn."""
        return len(self._idle)

    def ready(self) -> list[tuple[str, ContainerHandle]]:
        """The unclaimed sandboxes ready for a turn, oldest first: (id, handle)."""
        return [(warm.id, warm.handle) for warm in self._idle if warm.handle is not None]

    # -- the launcher interface ---------------------------------------------------------

    async def run(
        self,
        dispatch: bytes,
        turn_id: str,
        *,
        messages: trio.MemoryReceiveChannel[bytes] | None = None,
        task_status: trio.TaskStatus[ContainerHandle] = trio.TASK_STATUS_IGNORED,
    ) -> ContainerExit:
        """See :meth:`~.launcher.ContainerLauncher.run`: on a warm sandbox if one is
        ready, else cold. Raises :class:`LaunchError` (a cold start's)."""
        status = _StartStatus(self, task_status)
        try:
            claim = Claim(dispatch, turn_id, messages)
            warm = self._idle.popleft() if self._idle else None
            if warm is not None:
                exit_ = await self._serve_claim(warm, claim, status)
                if exit_ is not None:
                    return exit_
            self.misses += 1
            return await self.launcher.run(dispatch, turn_id, messages=messages, task_status=status)
        finally:
            status.settle()

    async def _serve_claim(
        self, warm: _Warm, claim: Claim, status: _StartStatus
    ) -> ContainerExit | None:
        """Give ``warm`` to ``claim``'s turn and own it until it is gone; ``None`` if it
        could not be bound (it is gone then, and the turn starts cold)."""
        warm.scope.shield = True  # the turn's from now on: the pool's end leaves it be
        warm.binding.give(claim)
        self.in_use += 1
        self._notify()
        try:
            try:
                await warm.binding.wait_bound()
            except LaunchError as exc:
                log.warning("turn %s: the warm sandbox %s: %s", claim.turn_id, warm.id, exc)
                return None
            assert warm.handle is not None
            self.claimed += 1
            status.started(warm.handle)
            await warm.gone.wait()
        finally:
            warm.scope.cancel()
            with trio.CancelScope(shield=True):
                await warm.gone.wait()
            self.in_use -= 1
            self._notify()
        return warm.handle.exit

    # -- the pool's own task --------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the pool filled until cancelled (or :meth:`close`); see the module
        docstring. Returns once every sandbox it started is gone."""
        try:
            with trio.CancelScope() as self._scope:
                async with trio.open_nursery() as nursery:
                    task_status.started()
                    await self._refill(nursery)
        finally:
            self._stopped.set()

    async def close(self) -> None:
        """End the pool: unclaimed sandboxes killed, then wait until :meth:`serve`
        returned (claimed ones gone with their turns). Idempotent; at once if
        :meth:`serve` never ran."""
        if self._scope is None:
            return
        self._scope.cancel()
        await self._stopped.wait()

    async def _refill(self, nursery: trio.Nursery) -> None:
        backoff = 1.0
        while True:
            while len(self._idle) >= self.size or self.starting > MAX_STARTING:
                await self._changed.wait()
            warm = _Warm(id=f"warm_{secrets.token_hex(8)}")
            self.started += 1
            self.filling += 1
            try:
                nursery.start_soon(self._keep, warm)
                await warm.settled.wait()
            finally:
                self.filling -= 1
            if warm.ready:
                backoff = 1.0
                continue
            self.failed += 1
            await trio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _keep(self, warm: _Warm) -> None:
        """Start ``warm``, put it in the pool once it says ready, recycle it after the
        TTL unless claimed, and own it until it is gone."""
        started_at = time.monotonic()
        try:
            with warm.scope:
                async with trio.open_nursery() as nursery:
                    try:
                        warm.handle = await nursery.start(
                            partial(self.launcher.run_warm, warm.id, warm.binding)
                        )
                    except LaunchError as exc:
                        log.warning("warm sandbox %s could not start: %s", warm.id, exc)
                        return
                    if not await _read_ready(warm.handle.stdout):
                        log.warning("warm sandbox %s: its container did not say ready", warm.id)
                        nursery.cancel_scope.cancel()
                        return
                    warm.ready = True
                    self._idle.append(warm)
                    warm.settled.set()
                    self._notify()
                    log.debug(
                        "warm sandbox %s ready in %.1f ms",
                        warm.id,
                        (time.monotonic() - started_at) * 1000,
                    )
                    nursery.start_soon(self._expire, warm)
        finally:
            if warm in self._idle:
                self._idle.remove(warm)
            warm.binding.bound(LaunchError(0, "it ended before it was bound"))
            warm.settled.set()
            warm.gone.set()
            self._notify()

    async def _expire(self, warm: _Warm) -> None:
        with trio.move_on_after(self.ttl):
            await warm.binding.wait_claimed()
        if not warm.binding.claimed:
            self.recycled += 1
            log.debug("warm sandbox %s unclaimed for %g s: recycled", warm.id, self.ttl)
            warm.scope.cancel()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


async def _read_ready(stdout: trio.abc.ReceiveStream) -> bool:
    """Read exactly :data:`~sandstream.core.WARM_READY` from a warm container's stdout
    (it writes nothing more before it is bound), within :data:`READY_TIMEOUT` s."""
    expected = WARM_READY
    with trio.move_on_after(READY_TIMEOUT):
        got = b""
        try:
            while len(got) < len(expected):
                chunk = await stdout.receive_some(len(expected) - len(got))
                if not chunk:
                    return False
                got += chunk
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return False
        return got == expected
    return False
