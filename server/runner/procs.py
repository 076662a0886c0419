"""Process plumbing for local containers: group signals, exit without reaping, stragglers.

A container leads a process group of its own. :func:`wait_exited` waits on a pidfd,
which reports the exit without reaping, so the group is signalled while the zombie
leader still reserves its id; :func:`sweep` finds the processes that left the group
(by the turn's marker ``SANDSTREAM_TURN_ID`` or the session id) and kills them. Only
:func:`sweep` blocks (it reads ``/proc``: run it in a worker thread). Why:
docs/architecture.md, "Process groups".
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Final

import trio

__all__ = [
    "TURN_MARKER_ENV",
    "close_pidfd",
    "describe_returncode",
    "open_pidfd",
    "signal_group",
    "sweep",
    "wait_exited",
]

TURN_MARKER_ENV: Final = "SANDSTREAM_TURN_ID"
"""Environment variable that marks every process of a turn's container."""

_PROC: Final = "/proc"


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; return ``False`` if the group is gone.

    ``PermissionError`` (the id now belongs to someone else's group) also counts as
    gone: never an exception for a group that has already ended.
    """
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def open_pidfd(pid: int) -> int | None:
    """A pidfd for child ``pid`` (Linux 5.3+), or ``None`` where there is none.

    Open it before the child can be reaped (that is, right after spawning it).
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(pid)
    except OSError:
        return None
    return fd


def close_pidfd(pidfd: int | None) -> None:
    """Close a pidfd from :func:`open_pidfd` (``None`` is fine), waking any waiter."""
    if pidfd is None:
        return
    trio.lowlevel.notify_closing(pidfd)
    os.close(pidfd)


async def wait_exited(process: trio.Process, pidfd: int | None) -> None:
    """Return once ``process`` has exited, leaving it unreaped when a pidfd is given.

    With a pidfd the child stays a zombie, so its group id cannot be reused until
    :meth:`trio.Process.wait` reaps it. Without one (non-Linux), this reaps it.
    Cancellation: returns nothing, changes nothing; the process keeps running.
    """
    if pidfd is None:
        await process.wait()
        return
    if process.returncode is not None:
        return
    await trio.lowlevel.wait_readable(pidfd)


def describe_returncode(returncode: int) -> str:
    """``exited with status 3`` / ``was killed by SIGKILL`` for a Popen-style return code."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"was killed by {name}"


def sweep(marker: str, session: int, *, rounds: int = 3) -> int:
    """``SIGKILL`` every live process of one container that outlived it; return how many.

    A process belongs to the container when its session id is ``session`` (the
    container's pid: it was started as a session leader) or when its environment holds
    ``marker`` (``"SANDSTREAM_TURN_ID=<id>"``), which finds processes that started
    sessions of their own. Zombies are skipped (they hold no resources; their parent
    or init reaps them), and so are members of the container's own group, which the
    group ``SIGKILL`` has already reached. Blocking: reads ``/proc``, so call it from
    a worker thread. Linux only; elsewhere it returns 0. A process that forks while
    being swept is caught by a later round (up to ``rounds``).
    """
    if not sys.platform.startswith("linux") or not os.path.isdir(_PROC):
        return 0
    needle = marker.encode()
    killed = 0
    for _ in range(rounds):
        found = _find(needle, session)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            killed += 1
    return killed


def _find(needle: bytes, session: int) -> list[int]:
    me = os.getpid()
    found: list[int] = []
    try:
        names = os.listdir(_PROC)
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        try:
            with open(f"{_PROC}/{name}/stat", "rb") as file:
                stat = file.read()
            # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parens.
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] in (b"Z", b"X"):
                continue
            if int(fields[2]) == session:
                continue  # in the container's own group: already SIGKILL-ed, dying
            sid = int(fields[3])
            if sid == session:
                found.append(pid)
                continue
            if sid == 0:  # kernel threads: no environment to read
                continue
            with open(f"{_PROC}/{name}/environ", "rb") as file:
                environ = file.read()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found
