"""Run a subprocess in its own process group, and make sure the whole group dies.

:func:`run_in_group` (setup script, skills, the claude-code CLI) gives the process a new
session and pipes read concurrently (no other descriptor of the container), and always
ends with a group kill: ``SIGKILL`` after a normal exit (nothing left in the background
survives), ``SIGTERM`` then ``SIGKILL`` after :data:`KILL_GRACE` on a timeout.
Cancellation does the same, shielded, then propagates, so a cancelled run stops within
about :data:`KILL_GRACE` seconds.

:func:`adopt_orphans` makes the container the parent of processes orphaned below it (a
tool whose agent died), so that the container can still find and end them.

:func:`hide_from_children` makes the container non-dumpable, so that what it runs (same
uid, no capabilities) can reach neither its memory nor its file descriptors.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import trio

from .landlock import own_domain

__all__ = [
    "KILL_GRACE",
    "ProcessOutcome",
    "adopt_orphans",
    "adopts_orphans",
    "hide_from_children",
    "kill_group",
    "run_in_group",
    "terminate_group",
]

KILL_GRACE: Final = 0.4
"""Seconds between ``SIGTERM`` and ``SIGKILL`` when a process group is stopped."""

_DRAIN_AFTER_EXIT: Final = 2.0
_PR_SET_DUMPABLE: Final = 4
_PR_SET_CHILD_SUBREAPER: Final = 36
_PR_GET_CHILD_SUBREAPER: Final = 37
_READ_SIZE: Final = 65536

ChunkHandler = Callable[[bytes], None]


@dataclass(frozen=True)
class ProcessOutcome:
    """How a process ended: its return code (negative: killed by that signal)."""

    returncode: int
    timed_out: bool

    def describe(self) -> str:
        """A short human description: ``exited with status 3``, ``killed by SIGKILL``."""
        if self.timed_out:
            return "timed out"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name}"
        return f"exited with status {self.returncode}"


def _prctl(option: int, arg: object) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # no C library to ask: not Linux
        return False
    return bool(libc.prctl(option, arg, 0, 0, 0) == 0)


def adopt_orphans() -> bool:
    """Become this process's descendants' subreaper (Linux): an orphan below it is
    re-parented to it, not to init. Whether that worked."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def adopts_orphans() -> bool:
    """Whether :func:`adopt_orphans` is in effect for this process."""
    flag = ctypes.c_int(0)
    return _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) and flag.value == 1


def hide_from_children() -> bool:
    """Make this process non-dumpable (Linux ``PR_SET_DUMPABLE`` 0). Whether that worked.

    Its ``/proc/<pid>/mem``, ``environ``, ``maps``, ``fd/*``, ``cwd``, ``root`` and
    ``ptrace``, ``process_vm_readv`` and ``pidfd_getfd`` on it then need
    ``CAP_SYS_PTRACE``, even for a process of the same uid: its children and what they
    start, which have no capabilities in a sandbox, cannot read its memory (the
    workspace tokens) or open its pipes (the envelope stream). Its ``cmdline`` and
    ``stat`` stay readable. A child gets the flag with the fork and loses it at
    ``execve`` (it holds no copy of this process's memory from then on). No core dump
    is written for this process.
    """
    return _prctl(_PR_SET_DUMPABLE, 0)


def kill_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def terminate_group(process: trio.Process, grace: float = KILL_GRACE) -> None:
    """``SIGTERM`` the process's group, wait up to ``grace`` s, then ``SIGKILL`` it.

    Run it shielded when called during cancellation; it returns within about
    ``2 * grace`` seconds whatever the processes do.
    """
    kill_group(process.pid, signal.SIGTERM)
    with trio.move_on_after(grace):
        await process.wait()
    kill_group(process.pid, signal.SIGKILL)
    with trio.move_on_after(grace):
        await process.wait()


async def run_in_group(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    stdin: bytes | None = None,
    on_stdout: ChunkHandler,
    on_stderr: ChunkHandler,
    timeout: float | None = None,
    grace: float = KILL_GRACE,
    confined: bool = False,
) -> ProcessOutcome:
    """Run ``argv`` in a new session, streaming its output to the handlers.

    ``stdin`` is written then closed (``None``: ``/dev/null``). Handlers are called with
    each chunk as it arrives; an exception from a handler stops the process (group
    killed) and propagates. On timeout the group is terminated and
    ``ProcessOutcome.timed_out`` is set. On cancellation the group is terminated
    (shielded) and :class:`trio.Cancelled` propagates. ``confined``: the process and
    all it starts run in a Landlock domain of their own (:func:`~.landlock.own_domain`:
    they can neither signal nor ``ptrace`` a process outside it), where the kernel
    allows one. Raises :class:`OSError` if the program cannot be started
    (:class:`subprocess.SubprocessError` if it cannot enter its domain).
    """
    domain = own_domain() if confined else None
    try:
        process = await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=os.fspath(cwd),
            env=dict(env),
            start_new_session=True,
            close_fds=True,  # stdio only: never the container's envelope or other pipes
            preexec_fn=domain,
        )
    finally:
        if domain is not None:
            domain.close()
    timed_out = False
    try:
        async with trio.open_nursery() as nursery:
            if stdin is not None and process.stdin is not None:
                nursery.start_soon(_feed, process.stdin, stdin)
            assert process.stdout is not None and process.stderr is not None
            nursery.start_soon(_pump, process.stdout, on_stdout)
            nursery.start_soon(_pump, process.stderr, on_stderr)
            with trio.move_on_after(math.inf if timeout is None else timeout) as deadline:
                await process.wait()
            if deadline.cancelled_caught:
                timed_out = True
                await terminate_group(process, grace)
            # Background leftovers holding the pipes die with their group; a reader of
            # a pipe held by something outside the group is given up after a while.
            kill_group(process.pid, signal.SIGKILL)
            nursery.cancel_scope.deadline = trio.current_time() + _DRAIN_AFTER_EXIT
    finally:
        if process.returncode is None:
            with trio.CancelScope(shield=True):
                await terminate_group(process, grace)
        kill_group(process.pid, signal.SIGKILL)
    returncode = process.returncode
    assert returncode is not None
    return ProcessOutcome(returncode=returncode, timed_out=timed_out)


async def _feed(stream: trio.abc.SendStream, data: bytes) -> None:
    try:
        async with stream:
            await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the process exited or closed stdin without reading it all


async def _pump(stream: trio.abc.ReceiveStream, handler: ChunkHandler) -> None:
    async with stream:
        while chunk := await stream.receive_some(_READ_SIZE):
            handler(bytes(chunk))
