"""The agent's process tree: started in its own process group, ended whole.

:func:`agent_process` starts the agent command in a new session (its own process group)
with pipes, and on leaving ends every process of its tree: the group gets ``SIGTERM``,
then after ``grace`` seconds ``SIGKILL``; descendants that left the group (a tool run
under ``setsid``) are found in ``/proc`` and killed too — those seen while the agent
ran as well, and in a container that adopts orphans (:func:`~...procs.adopt_orphans`)
every process below it, so a tool orphaned by an agent that died first is not missed. It runs
shielded, so a cancelled run still leaves nothing behind. Raises :class:`OSError` if
the command cannot start.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from ...procs import adopts_orphans, kill_group, terminate_group
from ...strays import alive, descendants, kill_all, reap, started

__all__ = ["agent_process"]

_SWEEPS = 5
_WATCH_INTERVAL = 0.2


async def _watch(pid: int, seen: dict[int, str | None]) -> None:
    """Remember ``pid``'s descendants, with their start times, until cancelled."""
    while True:
        for child in descendants(pid) - seen.keys():
            seen[child] = started(child)
        await trio.sleep(_WATCH_INTERVAL)


@asynccontextmanager
async def agent_process(
    command: Sequence[str], *, cwd: Path, env: Mapping[str, str], grace: float
) -> AsyncIterator[trio.Process]:
    """The running agent, with stdin, stdout and stderr pipes (see the module doc)."""
    process = await trio.lowlevel.open_process(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=os.fspath(cwd),
        env=dict(env),
        start_new_session=True,
        close_fds=True,  # stdio only: never the container's envelope or other pipes
    )
    seen: dict[int, str | None] = {}
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch, process.pid, seen)
            yield process
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            orphans = {pid for pid, since in seen.items() if started(pid) == since}
            if adopts_orphans():  # the container: what its agent left is its own now
                orphans |= descendants(os.getpid()) - {process.pid}
            strays = descendants(process.pid) | orphans
            if process.returncode is None:
                await terminate_group(process, grace)
            kill_group(process.pid, signal.SIGKILL)
            for _ in range(_SWEEPS):
                kill_all(strays)
                strays = {pid for pid in strays if alive(pid)}
                if not strays:
                    break
                await trio.sleep(0.01)
            reap(orphans)
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    await stream.aclose()
