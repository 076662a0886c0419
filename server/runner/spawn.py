"""Start a subprocess from one long-lived thread, and own it from trio.

``bwrap --die-with-parent`` arms ``PR_SET_PDEATHSIG``, which fires when the *thread*
that forked bwrap exits — not the process. :func:`trio.lowlevel.open_process` forks
from a worker thread that trio retires after 10 idle seconds, which would kill every
sandbox at 10 s. So :func:`spawn` forks from a dedicated daemon thread that lives as
long as the runner process (forking in the event loop's own thread would block it for
milliseconds), and :class:`SpawnedProcess` gives trio streams and a pidfd-based wait.
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import outcome
import trio

from .procs import close_pidfd, open_pidfd

__all__ = ["SpawnedProcess", "spawn"]

_Job = tuple[Callable[[], Any], Callable[[outcome.Outcome[Any]], None]]


class _SpawnThread:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, job: _Job) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="sandstream-spawn", daemon=True
                )
                self._thread.start()
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            function, deliver = self._jobs.get()
            deliver(outcome.capture(function))


_SPAWNER = _SpawnThread()


@dataclass(eq=False)
class SpawnedProcess:
    """A child process started by :func:`spawn`: trio streams, pid, pidfd, return code."""

    popen: subprocess.Popen[bytes]
    pidfd: int
    stdin: trio.lowlevel.FdStream | None
    stdout: trio.lowlevel.FdStream | None
    stderr: trio.lowlevel.FdStream | None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """Popen-style (negative: killed by that signal), once reaped by :meth:`wait`."""
        return self.popen.returncode

    async def wait_exited(self) -> None:
        """Return once it has exited, without reaping it. Cancellation: changes nothing."""
        if self.popen.returncode is None:
            await trio.lowlevel.wait_readable(self.pidfd)

    async def wait(self) -> int:
        """Wait for the exit, reap it, close the pidfd; return the return code."""
        await self.wait_exited()
        returncode = self.popen.wait()  # exited: does not block
        if self.pidfd >= 0:
            close_pidfd(self.pidfd)
            self.pidfd = -1
        return returncode


async def spawn(argv: Sequence[str], **popen_options: Any) -> SpawnedProcess:
    """``subprocess.Popen(argv, **popen_options)`` from the spawn thread.

    Pipes (``stdin``/``stdout``/``stderr`` = ``PIPE``) come back as trio streams.
    Raises what Popen raises (``OSError``), or ``OSError`` without pidfd support.
    Cancellation: the wait for the fork (milliseconds) is shielded, so the process is
    always handed back; the caller owns it from then on.
    """
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    box: list[outcome.Outcome[subprocess.Popen[bytes]]] = []

    def deliver(result: outcome.Outcome[Any]) -> None:
        box.append(result)
        token.run_sync_soon(done.set)

    _SPAWNER.submit((lambda: subprocess.Popen(list(argv), **popen_options), deliver))
    with trio.CancelScope(shield=True):
        await done.wait()
    popen = box[0].unwrap()
    pidfd = open_pidfd(popen.pid)
    if pidfd is None:
        popen.kill()
        popen.wait()
        raise OSError("sandboxes need pidfd_open (Linux 5.3 or later)")
    process = SpawnedProcess(
        popen, pidfd, _adopt(popen.stdin), _adopt(popen.stdout), _adopt(popen.stderr)
    )
    return process


def _adopt(file: Any) -> trio.lowlevel.FdStream | None:
    """A trio stream on the pipe behind a Popen file object (which is closed)."""
    if file is None:
        return None
    stream = trio.lowlevel.FdStream(os.dup(file.fileno()))
    file.close()
    return stream
