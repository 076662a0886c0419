"""A server (or any long-running program) as a real subprocess of a trio nursery.

::

    server = await ServerProcess.start(nursery, argv, listening=re.compile(r"on (http://\\S+)"))
    server.url                                  # the pattern's first group, from its output
    server.stderr[-5:]                          # its output so far, one decoded line an item
    await server.stop()                         # now, rather than when the nursery ends

Its output (``capture``: its stdout, its stderr, both, or both merged into
``stdout``; what is not captured goes to /dev/null, and so does its stdin) is read as
long as it runs, so that no pipe ever fills, and kept line by line. :meth:`start`
returns once a line matches ``listening`` (``None``: at once, for a program that
listens on nothing); it raises :class:`ProcessExited` with the last lines of its
output when the process exits first, and :class:`trio.TooSlowError` (with them too)
after ``deadline`` seconds; either way the process is stopped.

Cancelling the nursery stops the process (shielded) the way :meth:`ServerProcess.stop`
does: ``stop_signal``, then ``SIGKILL`` after ``grace`` seconds (its output still read
meanwhile), and waits for it, so that no process outlives its nursery.
:attr:`ServerProcess.exited` is set once it has exited and its output was read to the end.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Final, Literal, Self

import trio

__all__ = ["Capture", "ProcessExited", "ServerProcess"]

Capture = Literal["stdout", "stderr", "both", "merged"]
_PIPES: Final[dict[Capture, tuple[int, int]]] = {
    "stdout": (subprocess.PIPE, subprocess.DEVNULL),
    "stderr": (subprocess.DEVNULL, subprocess.PIPE),
    "both": (subprocess.PIPE, subprocess.PIPE),
    "merged": (subprocess.PIPE, subprocess.STDOUT),
}
_TAIL: Final = 20
"""Lines of each stream an error shows."""


class ProcessExited(Exception):
    """The process exited before what was waited for."""


@dataclass(eq=False)
class ServerProcess:
    """A running process and what it printed so far; see the module's docstring."""

    process: trio.Process
    command: str
    """Its command line, as errors name it."""
    stop_signal: int = signal.SIGTERM
    grace: float = 30.0
    """Seconds it is given to exit after ``stop_signal`` (``math.inf``: as long as it takes)."""
    url: str = ""
    """The first group of the line that matched ``listening`` (without a trailing ``/``)."""
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    exited: trio.Event = field(default_factory=trio.Event)
    _changed: trio.Event = field(default_factory=trio.Event, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(
        cls,
        nursery: trio.Nursery,
        argv: Sequence[str],
        *,
        listening: re.Pattern[str] | None,
        capture: Capture = "stderr",
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stop_signal: int = signal.SIGTERM,
        grace: float = 30.0,
        deadline: float = 30.0,
    ) -> Self:
        """Start ``argv`` in ``nursery`` (with ``env``, or this process's environment,
        in ``cwd``); return it once a line of its output matched ``listening``."""
        stdout, stderr = _PIPES[capture]
        process = await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=None if env is None else dict(env),
            cwd=cwd,
        )
        server = cls(process, shlex.join(argv), stop_signal, grace)
        readers = [
            _Reader(pipe, partial(server._line, lines, listening))
            for pipe, lines in ((process.stdout, server.stdout), (process.stderr, server.stderr))
            if pipe is not None
        ]
        nursery.start_soon(server._supervise, readers)
        if listening is not None:
            try:
                await server.wait_for(lambda: bool(server.url), "where it listens", deadline)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await server.stop()
                raise
        return server

    async def stop(self) -> int:
        """Stop it now (``stop_signal``, ``SIGKILL`` after ``grace`` seconds) and wait
        for it; its exit status. Its output may still be being read: see :attr:`exited`."""
        if self.process.returncode is None:
            self.process.send_signal(self.stop_signal)
            with trio.move_on_after(self.grace):
                await self.process.wait()
        if self.process.returncode is None:
            self.process.kill()
        return await self.process.wait()

    async def wait_for(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        """Wait until ``done()``, checked after each line it prints and once it has exited.

        Raises :class:`ProcessExited` if it exits first, :class:`trio.TooSlowError` after
        ``timeout`` seconds; each says ``what`` was waited for, with its last lines.
        """
        with trio.move_on_after(timeout):
            while not done():
                if self.exited.is_set():
                    code = self.process.returncode
                    raise ProcessExited(self._story(f"exited ({code}) before {what}"))
                await self._changed.wait()
            return
        raise trio.TooSlowError(self._story(f"waited {timeout} s for {what}"))

    def _story(self, what: str) -> str:
        told = [f"{self.command} {what}"]
        for name, lines in (("stdout", self.stdout), ("stderr", self.stderr)):
            if lines:
                told.append(f"its last {name} lines:\n" + "\n".join(lines[-_TAIL:]))
        return "\n".join(told)

    def _line(self, lines: list[str], listening: re.Pattern[str] | None, text: str) -> None:
        lines.append(text)
        if listening is not None and not self.url and (found := listening.search(text)):
            self.url = found.group(1).rstrip("/")
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _supervise(self, readers: list[_Reader]) -> None:
        try:
            async with trio.open_nursery() as reading:
                for reader in readers:
                    reading.start_soon(reader.run)
                await self.process.wait()
        finally:
            with trio.CancelScope(shield=True):
                if self.process.returncode is None:  # cancelled: stop it, reading on
                    async with trio.open_nursery() as draining:
                        for reader in readers:
                            draining.start_soon(reader.run)
                        await self.stop()
                        draining.cancel_scope.cancel()
                for reader in readers:
                    await reader.pipe.aclose()
            self.exited.set()
            self._notify()


class _Reader:
    """One output pipe, split into lines; :meth:`run` may be cancelled and run again."""

    def __init__(self, pipe: trio.abc.ReceiveStream, on_line: Callable[[str], None]) -> None:
        self.pipe = pipe
        self.on_line = on_line
        self._pending = b""

    async def run(self) -> None:
        while chunk := await self.pipe.receive_some():
            *complete, self._pending = (self._pending + chunk).split(b"\n")
            for raw in complete:
                self.on_line(raw.decode("utf-8", "replace"))
        if self._pending:
            self.on_line(self._pending.decode("utf-8", "replace"))
            self._pending = b""
