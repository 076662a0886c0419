"""The agent's process tree: started in its own process group, ended whole.

:func:`agent_process` starts the agent command in a new session (its own process group)
with its stdin, stdout and stderr on Unix socket pairs, not pipes: a socket cannot be
opened again through ``/proc/<pid>/fd``, so a process of the same uid (a tool the agent
runs, a daemon a setup script left) can neither write into the agent's output nor read
or answer its requests that way. On leaving it ends every process of its tree: the group
gets ``SIGTERM``, then after ``grace`` seconds ``SIGKILL``; descendants that left the
group (a tool run under ``setsid``) are found in ``/proc`` and killed too — those seen
while the agent ran as well, and in a container that adopts orphans
(:func:`~...procs.adopt_orphans`) every process below it, so a tool orphaned by an agent
that died first is not missed. It runs shielded, so a cancelled run still leaves nothing
behind. Raises :class:`OSError` if the command cannot start.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

from ...procs import adopts_orphans, kill_group, terminate_group
from ...strays import alive, descendants, kill_all, reap, started

__all__ = ["AgentProcess", "agent_process"]

_SWEEPS = 5
_WATCH_INTERVAL = 0.2


async def _watch(pid: int, seen: dict[int, str | None]) -> None:
    """Remember ``pid``'s descendants, with their start times, until cancelled."""
    while True:
        for child in descendants(pid) - seen.keys():
            seen[child] = started(child)
        await trio.sleep(_WATCH_INTERVAL)


def _left(agent: int) -> set[int]:
    """The processes below the agent, and in a container that adopts orphans every
    process below it but the agent (what the agent left is the container's now)."""
    below = descendants(agent)
    if adopts_orphans():
        below |= descendants(os.getpid()) - {agent}
    return below


@dataclass(frozen=True)
class AgentProcess:
    """The running agent and this side of its stdin, stdout and stderr."""

    process: trio.Process
    stdin: trio.abc.SendStream
    stdout: trio.abc.ReceiveStream
    stderr: trio.abc.ReceiveStream


def _stdio_pair(stack: ExitStack) -> tuple[socket.socket, socket.socket]:
    """A connected pair of Unix stream sockets (ours, the agent's), closed with ``stack``."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stack.callback(ours.close)
    stack.callback(theirs.close)
    return ours, theirs


def _stream(sock: socket.socket) -> trio.SocketStream:
    """``sock`` as a trio stream, which owns it from then on."""
    return trio.SocketStream(trio.socket.from_stdlib_socket(sock.dup()))


@asynccontextmanager
async def agent_process(
    command: Sequence[str], *, cwd: Path, env: Mapping[str, str], grace: float
) -> AsyncIterator[AgentProcess]:
    """The running agent, with its stdio on socket pairs (see the module doc)."""
    with ExitStack() as stack:
        pairs = [_stdio_pair(stack) for _ in range(3)]
        process = await trio.lowlevel.open_process(
            list(command),
            stdin=pairs[0][1].fileno(),
            stdout=pairs[1][1].fileno(),
            stderr=pairs[2][1].fileno(),
            cwd=os.fspath(cwd),
            env=dict(env),
            start_new_session=True,
            close_fds=True,  # stdio only: never the container's envelope or other sockets
        )
        stdin, stdout, stderr = (_stream(ours) for ours, _ in pairs)
    # Only the agent holds its ends now: its exit is our end of file.
    agent = AgentProcess(process, stdin, stdout, stderr)
    seen: dict[int, str | None] = {}
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch, process.pid, seen)
            yield agent
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            orphans = {pid for pid, since in seen.items() if started(pid) == since}
            strays = _left(process.pid) | orphans
            if process.returncode is None:
                await terminate_group(process, grace)
            kill_group(process.pid, signal.SIGKILL)
            for _ in range(_SWEEPS):
                # Looked for again each time: what was started or orphaned while the
                # agent ended (a tool its shell had just forked) is as much to kill.
                strays |= _left(process.pid)
                orphans |= strays
                kill_all(strays)
                strays = {pid for pid in strays if alive(pid)}
                if not strays:
                    break
                await trio.sleep(0.01)
            reap(orphans)
            for stream in (stdin, stdout, stderr):
                await stream.aclose()
