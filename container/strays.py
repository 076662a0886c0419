"""The processes below the container: found in ``/proc``, ended, reaped.

What a tool leaves running when its agent ends (a daemon, a tool under ``setsid``) is
found by walking ``/proc`` from a pid (:func:`descendants`) and killed
(:func:`kill_all`); a pid is told from a reused one by its start time (:func:`started`).
:func:`end_descendants` ends everything below the container, so that nothing the agent
ran can still change its files. Raises nothing for processes that are gone already.
"""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from pathlib import Path
from typing import Final

import trio

__all__ = ["alive", "descendants", "end_descendants", "kill_all", "reap", "started"]

_SWEEPS: Final = 5


def descendants(pid: int) -> set[int]:
    """The pids of ``pid``'s descendants now (from ``/proc``; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


def started(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot), to tell it from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[19]


def reap(pids: set[int]) -> None:
    """Collect the exit of those of ``pids`` that were re-parented to this process."""
    for pid in pids:
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


async def end_descendants() -> None:
    """``SIGKILL`` every process below this one until none is left alive (a few sweeps,
    for one that forked meanwhile), and reap those that were its children."""
    strays = descendants(os.getpid())
    for _ in range(_SWEEPS):
        if not strays:
            return
        kill_all(strays)
        await trio.sleep(0.01)
        reap(strays)
        strays = {pid for pid in strays if alive(pid)} | descendants(os.getpid())
