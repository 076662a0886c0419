"""Container launch behind a small interface: :class:`ContainerLauncher`.

A launcher starts a sandbox with the dispatch JSON, hands over its stdout, and returns
only once the sandbox is gone, in the idiom of ``nursery.start``::

    handle = await nursery.start(launcher.run, dispatch_bytes, "turn_abc")
    data = await handle.stdout.receive_some()  # the caller owns handle.stdout

Cancellation stops the sandbox and returns once it is gone; a sandbox that cannot start
raises ``LaunchError`` (docs/architecture.md, "Sandboxes: the launcher interface").
:class:`LocalSubprocessLauncher` runs the container as a local subprocess (``--sandbox local``).
A :class:`WarmLauncher` also starts a container ahead of its turn (``run_warm``: the
warm pool, :mod:`.pool`), which a turn binds later (:mod:`.binding`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, TypeAlias

import trio

from .binding import WARM_FLAG, Binding, Claim
from .errors import LaunchError
from .huge_pages import heap_env
from .limits import LimitExceeded
from .procs import (
    TURN_MARKER_ENV,
    close_pidfd,
    describe_returncode,
    open_pidfd,
    signal_group,
    sweep,
    wait_exited,
)

__all__ = [
    "DEFAULT_CONTAINER_ARGV",
    "DEFAULT_KILL_GRACE",
    "PASSED_ENV",
    "ContainerExit",
    "ContainerHandle",
    "ContainerLauncher",
    "LocalContainer",
    "LocalSubprocessLauncher",
    "StderrMode",
    "WarmLauncher",
    "container_heap_env",
    "feed_bound",
    "feed_stdin",
    "grow_pipe",
    "is_container_command",
    "log_stderr",
]

DEFAULT_KILL_GRACE: Final = 2.0
"""Seconds between ``SIGTERM`` and ``SIGKILL`` when a container is stopped."""

DEFAULT_CONTAINER_ARGV: Final[tuple[str, ...]] = (sys.executable, "-m", "sandstream.container")

PASSED_ENV: Final = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
"""The only variables of the runner's environment a local container inherits."""

StderrMode: TypeAlias = Literal["log", "inherit", "discard"]

STDERR_TARGETS: Final[dict[StderrMode, int | None]] = {
    "log": subprocess.PIPE,
    "inherit": None,
    "discard": subprocess.DEVNULL,
}
"""What a container's stderr is connected to, per :data:`StderrMode`."""

_STDERR_LINE_LIMIT: Final = 4096
_STDERR_MAX_LINES: Final = 2000
_DRAIN_STDERR_AFTER_EXIT: Final = 1.0

container_log = logging.getLogger("sandstream.container")
log = logging.getLogger("sandstream.runner")


def container_heap_env(argv: Sequence[str]) -> dict[str, str]:
    """What our Python container (``argv`` runs ``-m sandstream.container``) is started
    with so that its heap is in huge pages where the host gives them
    (:mod:`sandstream.container.huge_pages`); ``{}`` for any other command.

    A custom command gets nothing: the tunable would change the allocator of whatever
    it runs, which is the user's to choose (``env`` can set it).
    """
    if not is_container_command(argv):
        return {}
    return heap_env()


def is_container_command(argv: Sequence[str]) -> bool:
    """True if ``argv`` runs our container (``PYTHON -m sandstream.container ...``)."""
    return tuple(argv[1:3]) == ("-m", "sandstream.container")


@dataclass(frozen=True, slots=True)
class ContainerExit:
    """How a container ended.

    ``returncode`` follows Popen (negative: killed by that signal). ``terminated``:
    the launcher stopped it (cancellation), ``escalated``: it ignored ``SIGTERM`` for
    the whole grace and got ``SIGKILL``. ``stragglers``: processes of the container
    still alive after it exited, killed by the sweep. ``stopped_at`` / ``reaped_at``
    are :func:`time.monotonic` readings: when the stop began (``None`` if it exited
    on its own) and when it was reaped. ``limit``: the resource limit that made the
    launcher end it, if any.
    """

    returncode: int
    terminated: bool = False
    escalated: bool = False
    stragglers: int = 0
    stopped_at: float | None = None
    reaped_at: float = 0.0

    limit: LimitExceeded | None = None
    """Set when the launcher ended the sandbox because it went over a resource limit."""

    def describe(self) -> str:
        """``exited with status 3`` / ``was killed by SIGKILL``."""
        return describe_returncode(self.returncode)


class ContainerHandle(Protocol):
    """A running sandbox, as the streaming code sees it."""

    @property
    def id(self) -> str:
        """Backend-specific identity, for logs (``pid:1234``)."""
        ...

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        """The container's stdout. The caller reads it to EOF and closes it."""
        ...

    @property
    def exit(self) -> ContainerExit | None:
        """How it ended, once the launch task has finished (also when cancelled)."""
        ...


class ContainerLauncher(Protocol):
    """Starts sandboxes. One call of :meth:`run` owns one sandbox for its lifetime."""

    async def run(
        self,
        dispatch: bytes,
        turn_id: str,
        *,
        messages: trio.MemoryReceiveChannel[bytes] | None = None,
        task_status: trio.TaskStatus[ContainerHandle] = trio.TASK_STATUS_IGNORED,
    ) -> ContainerExit:
        """Start a sandbox with ``dispatch`` (the JSON body) and own it until it is gone.

        Calls ``task_status.started(handle)`` once stdout can be read, then returns
        when the sandbox has exited and nothing of it is left (processes reaped).
        The sandbox's stdin gets the dispatch as one line; with ``messages``, stdin
        stays open and each line received there follows (a durable session's user
        messages), until the channel closes; the launcher closes ``messages`` when
        the sandbox is gone, so a sender then gets :class:`trio.BrokenResourceError`.

        Cancellation: stops the sandbox (``SIGTERM``, grace, ``SIGKILL`` for a local
        process), waits until it is gone, records ``handle.exit``, then lets
        :class:`trio.Cancelled` propagate. Raises :class:`LaunchError` before
        ``started`` if it cannot start the sandbox.
        """
        ...


class WarmLauncher(ContainerLauncher, Protocol):
    """A launcher that can also start a container ahead of its turn (:mod:`.pool`)."""

    async def run_warm(
        self,
        sandbox_id: str,
        binding: Binding,
        *,
        task_status: trio.TaskStatus[ContainerHandle] = trio.TASK_STATUS_IGNORED,
    ) -> ContainerExit:
        """Start a sandbox with the container's warm flag (:data:`~.binding.WARM_FLAG`)
        marked ``sandbox_id``, hand it to ``task_status`` as :meth:`ContainerLauncher.run`
        does, and own it until it is gone. Its stdin gets nothing until ``binding`` is
        claimed; then the launcher's per-turn step runs (a bwrap sandbox's network),
        the binding is settled (its error: the step failed, the sandbox is ended), and
        the binding line, the dispatch and the claim's messages follow.

        Cancellation and errors as for :meth:`ContainerLauncher.run`.
        """
        ...


@dataclass(eq=False)
class LocalContainer:
    """A container running as a local subprocess: the session leader ``pid``."""

    process: trio.Process
    turn_id: str
    exit: ContainerExit | None = None

    @property
    def id(self) -> str:
        return f"pid:{self.process.pid}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def pgid(self) -> int:
        """The process group (and session) id: the leader's pid."""
        return self.process.pid

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        stdout = self.process.stdout
        assert stdout is not None
        return stdout


@dataclass
class LocalSubprocessLauncher:
    """Run each container as ``argv`` in a new session; dispatch JSON on its stdin
    (:func:`feed_stdin`). Development only: it isolates nothing (docs/architecture.md,
    "--sandbox local"; :class:`~sandstream.server.runner.bwrap.BwrapLauncher` is the sandbox).

    Cancellation: ``SIGTERM`` to its process group, up to ``kill_grace`` seconds for the
    leader, then ``SIGKILL`` to the group, then the leader is reaped; after any exit but a
    clean 0, processes that escaped the group are found by their turn marker and killed.
    Its environment: the runner's ``pass_env`` variables, :func:`container_heap_env`,
    ``env`` and ``SANDSTREAM_TURN_ID``; its ``TMPDIR`` is removed once it is gone.
    ``stderr``: ``"log"`` (the ``sandstream.container`` logger, bounded), ``"inherit"`` or
    ``"discard"``. ``pipe_size``: the stdout pipe's size (Linux; an unprivileged user's
    pipes share one budget, ``/proc/sys/fs/pipe-user-pages-soft``).
    """

    argv: Sequence[str] = DEFAULT_CONTAINER_ARGV
    kill_grace: float = DEFAULT_KILL_GRACE
    env: Mapping[str, str] = field(default_factory=dict)
    pass_env: Sequence[str] = PASSED_ENV
    cwd: str | None = None
    stderr: StderrMode = "log"
    pipe_size: int | None = 256 * 1024
    sweep_stragglers: bool = True

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("argv must name a program")
        if not (self.kill_grace >= 0 and math.isfinite(self.kill_grace)):
            raise ValueError(f"kill_grace must be a finite number >= 0, got {self.kill_grace}")

    def container_env(self, turn_id: str, tmpdir: str) -> dict[str, str]:
        """The environment a container of turn ``turn_id`` starts with, its temp dir
        ``tmpdir``."""
        env = {name: os.environ[name] for name in self.pass_env if name in os.environ}
        env.update(container_heap_env(self.argv))
        env.update(self.env)
        env["TMPDIR"] = tmpdir
        env[TURN_MARKER_ENV] = turn_id
        return env

    async def run(
        self,
        dispatch: bytes,
        turn_id: str,
        *,
        messages: trio.MemoryReceiveChannel[bytes] | None = None,
        task_status: trio.TaskStatus[ContainerHandle] = trio.TASK_STATUS_IGNORED,
    ) -> ContainerExit:
        """See :meth:`ContainerLauncher.run`. Raises :class:`LaunchError`."""
        binding = Binding.cold(Claim(dispatch, turn_id, messages))
        return await self._run(self.argv, turn_id, binding, task_status)

    async def run_warm(
        self,
        sandbox_id: str,
        binding: Binding,
        *,
        task_status: trio.TaskStatus[ContainerHandle] = trio.TASK_STATUS_IGNORED,
    ) -> ContainerExit:
        """See :meth:`WarmLauncher.run_warm`. Raises :class:`LaunchError`."""
        return await self._run([*self.argv, WARM_FLAG], sandbox_id, binding, task_status)

    async def _run(
        self,
        argv: Sequence[str],
        turn_id: str,
        binding: Binding,
        task_status: trio.TaskStatus[ContainerHandle],
    ) -> ContainerExit:
        """Start ``argv`` marked ``turn_id``, its stdin fed once ``binding`` is claimed
        (:func:`feed_bound`); own it until it is gone (see :meth:`run`)."""
        try:
            tmpdir = tempfile.mkdtemp(prefix=f"sandstream-{turn_id}-")
        except OSError as exc:
            message = f"cannot create the container's temp dir: {exc.strerror or exc}"
            raise LaunchError(exc.errno, message) from exc
        try:
            process = await trio.lowlevel.open_process(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=STDERR_TARGETS[self.stderr],
                start_new_session=True,
                env=self.container_env(turn_id, tmpdir),
                cwd=self.cwd,
            )
        except BaseException as exc:
            os.rmdir(tmpdir)
            if not isinstance(exc, OSError):
                raise
            message = f"cannot start {self.argv[0]!r}: {exc.strerror or exc}"
            raise LaunchError(exc.errno, message) from exc
        pidfd = open_pidfd(process.pid)
        container = LocalContainer(process, turn_id)
        if self.pipe_size:
            grow_pipe(container.stdout, self.pipe_size)
        exited = False
        stopped_at: float | None = None
        escalated = False
        task_status.started(container)
        try:
            async with trio.open_nursery() as nursery:
                assert process.stdin is not None
                nursery.start_soon(feed_bound, process.stdin, binding)
                if process.stderr is not None:
                    nursery.start_soon(log_stderr, process.stderr, turn_id)
                await wait_exited(process, pidfd)
                exited = True
                if (messages := binding.turn_messages()) is not None:
                    messages.close()  # nobody reads them any more
                # Leftovers in the group die now, while the zombie leader still
                # reserves the group id. Their stderr then reaches EOF.
                signal_group(process.pid, signal.SIGKILL)
                nursery.cancel_scope.deadline = trio.current_time() + _DRAIN_STDERR_AFTER_EXIT
        finally:
            with trio.CancelScope(shield=True):
                if not exited:
                    stopped_at = time.monotonic()
                    escalated = await self._terminate(process, pidfd)
                signal_group(process.pid, signal.SIGKILL)
                returncode = await process.wait()
                reaped_at = time.monotonic()
                close_pidfd(pidfd)
                stragglers = 0
                if self.sweep_stragglers and (stopped_at is not None or returncode != 0):
                    for marker in binding.markers(turn_id):
                        stragglers += await trio.to_thread.run_sync(
                            sweep, f"{TURN_MARKER_ENV}={marker}", process.pid
                        )
                    if stragglers:
                        log.warning(
                            "turn %s: killed %d process(es) that outlived the container",
                            turn_id,
                            stragglers,
                        )
                container.exit = ContainerExit(
                    returncode=returncode,
                    terminated=stopped_at is not None,
                    escalated=escalated,
                    stragglers=stragglers,
                    stopped_at=stopped_at,
                    reaped_at=reaped_at,
                )
                await remove_tmpdir(tmpdir)
        assert container.exit is not None
        return container.exit

    async def _terminate(self, process: trio.Process, pidfd: int | None) -> bool:
        """``SIGTERM`` the group, wait out the grace, ``SIGKILL``. True if it had to."""
        signal_group(process.pid, signal.SIGTERM)
        with trio.move_on_after(self.kill_grace) as grace:
            await wait_exited(process, pidfd)
        if grace.cancelled_caught:
            signal_group(process.pid, signal.SIGKILL)
            return True
        return False


async def remove_tmpdir(path: str) -> None:
    """Remove a gone container's temp dir: at once when it is empty (the usual case),
    else with what is in it, in a thread (:func:`remove_tree`). Errors are logged,
    never raised."""
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    errors = await trio.to_thread.run_sync(remove_tree, path)
    if errors:
        log.warning("cannot remove the container's temp dir: %s", "; ".join(errors[:3]))


def remove_tree(path: str) -> list[str]:
    """``rm -rf path``, also through dirs a container made read-only (``chmod 555``,
    as Go's module cache does): each dir is opened to its owner before its entries
    are removed. Returns what could not be removed, with why."""
    errors: list[str] = []

    def note(_function: object, name: str, exc_info: tuple[type, BaseException, object]) -> None:
        errors.append(f"{name}: {exc_info[1]}")

    if os.path.islink(path):  # the container put a link in its place: never follow it
        os.unlink(path)
        return errors
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    for root, dirs, _files in os.walk(path):  # top-down: a dir is opened before its walk
        for name in dirs:
            entry = os.path.join(root, name)
            if not os.path.islink(entry):  # a link to a dir elsewhere is removed, not opened
                with contextlib.suppress(OSError):
                    os.chmod(entry, 0o700)
    shutil.rmtree(path, onerror=note)
    return errors


def grow_pipe(stream: trio.abc.ReceiveStream, size: int) -> None:
    """Enlarge the pipe behind ``stream`` to ``size`` bytes where Linux allows it."""
    setpipe: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    fileno = getattr(stream, "fileno", None)
    if setpipe is None or fileno is None:
        return
    with contextlib.suppress(OSError):  # over /proc/sys/fs/pipe-max-size: keep the default
        fcntl.fcntl(fileno(), setpipe, size)


async def feed_stdin(
    stdin: trio.abc.SendStream,
    dispatch: bytes,
    messages: trio.MemoryReceiveChannel[bytes] | None = None,
) -> None:
    """Write the dispatch as one line, then each of ``messages``, then close stdin.

    A container that exits first is fine. ``messages`` is closed on the way out
    (also on cancellation), so whoever sends more learns the container is gone.
    """
    try:
        async with stdin:
            line = dispatch if dispatch.endswith(b"\n") else dispatch + b"\n"
            await stdin.send_all(line)
            if messages is not None:
                async for message in messages:
                    await stdin.send_all(message)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        if messages is not None:
            messages.close()


async def log_stderr(stderr: trio.abc.ReceiveStream, turn_id: str) -> None:
    """Read stderr to EOF, logging each line (truncated; at most a bounded number)."""
    pending = b""
    logged = 0
    dropped = 0

    def emit(line: bytes) -> None:
        nonlocal logged, dropped
        if logged >= _STDERR_MAX_LINES:
            dropped += 1
            return
        logged += 1
        text = line[:_STDERR_LINE_LIMIT].decode("utf-8", "replace").rstrip()
        container_log.info("[%s] %s", turn_id, text)

    try:
        async with stderr:
            while chunk := await stderr.receive_some(65536):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()[: _STDERR_LINE_LIMIT + 1]
                for line in lines:
                    emit(line)
            if pending:
                emit(pending)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        if dropped:
            container_log.info("[%s] ... %d more stderr lines not logged", turn_id, dropped)


async def feed_bound(
    stdin: trio.abc.SendStream,
    binding: Binding,
    prepare: Callable[[Claim], Awaitable[None]] | None = None,
) -> None:
    """Wait for the claim, run ``prepare`` (the launcher's per-turn step; its
    :class:`LaunchError` is the binding's error and ends this, stdin closed), settle the
    binding, then write the binding line (warm), the dispatch and the messages
    (:func:`feed_stdin`). Cancellation: stdin is closed; an unsettled claim
    is left to the pool (it waits for the sandbox to be gone)."""
    claim = await binding.wait_claimed()
    if prepare is not None:
        try:
            await prepare(claim)
        except LaunchError as exc:
            binding.bound(exc)
            await stdin.aclose()
            return
    binding.bound()
    dispatch = claim.dispatch if claim.dispatch.endswith(b"\n") else claim.dispatch + b"\n"
    head = claim.binding_line() if binding.warm else b""
    await feed_stdin(stdin, head + dispatch, claim.messages)
