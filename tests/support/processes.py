"""Find processes by a variable of their environment, even orphaned ones, and kill them.

A process's environment is inherited by everything it starts, whatever the children
do to their session, group or parent, so a marker variable finds a whole tree after
its root has died (the runner's turn marker, the suite's leak marker).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection, Iterable
from contextlib import suppress

import psutil

__all__ = ["blocked_writing", "describe", "kill", "with_env"]


def with_env(name: str, values: Collection[str] | None = None) -> list[int]:
    """Live processes other than this one whose environment sets ``name``.

    With ``values``, only those where it is set to one of them. Zombies and processes
    that cannot be read (gone meanwhile, another user's) are left out.
    """
    prefix = f"{name}=".encode()
    wanted = None if values is None else {prefix + value.encode() for value in values}
    found = []
    for proc in psutil.process_iter(["status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as file:
                entries = file.read().split(b"\0")
        except OSError:
            continue
        if wanted is None:
            hit = any(entry.startswith(prefix) for entry in entries)
        else:
            hit = any(entry in wanted for entry in entries)
        if hit:
            found.append(proc.pid)
    return found


def blocked_writing(pid: int) -> bool:
    """True while process ``pid`` sleeps in a write to a full pipe (its ``wchan``)."""
    try:
        with open(f"/proc/{pid}/wchan") as handle:
            return "pipe_write" in handle.read()
    except OSError:
        return False


def describe(pid: int) -> str:
    """``pid``, its command line and its ``TMPDIR`` (which names the test that started it)."""
    try:
        proc = psutil.Process(pid)
        tmpdir = proc.environ().get("TMPDIR", "?")
        return f"{pid} {' '.join(proc.cmdline())!r} (TMPDIR={tmpdir})"
    except psutil.Error:
        return f"{pid} (gone)"


def kill(pids: Iterable[int]) -> None:
    """SIGKILL each process and the group it leads, if any (test cleanup)."""
    for pid in pids:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
