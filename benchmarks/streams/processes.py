"""Run the benchmark's client processes (:mod:`.client`) from its trio parent.

:func:`client_process` starts ``python -m benchmarks.streams.<module> ARGS`` with
pipes to its stdin and stdout (its stderr is this process's) and kills it if the
block is left while it runs (an error, a cancellation). :meth:`ClientProcess.ready`
waits for its ``ready`` line, :meth:`~ClientProcess.go` starts it, and
:meth:`~ClientProcess.result` waits for it to exit and returns its JSON, raising
:class:`ClientFailed` if it failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

__all__ = ["ClientFailed", "ClientProcess", "client_process"]


class ClientFailed(Exception):
    """A client process exited non-zero (it said why on stderr) or said nothing."""


class ClientProcess:
    def __init__(self, name: str, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.name = name
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._buffer = b""

    async def _line(self) -> bytes:
        while b"\n" not in self._buffer:
            data = await self._stdout.receive_some()
            if not data:
                code = await self.process.wait()
                raise ClientFailed(f"{self.name} exited ({code}) before its next line")
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    async def ready(self, timeout: float = 300.0) -> None:
        """Wait until it is set up (connected, caught up)."""
        with trio.fail_after(timeout):
            line = await self._line()
        if line != b"ready":
            raise ClientFailed(f"{self.name} said {line!r}, not ready")

    async def go(self) -> None:
        await self._stdin.send_all(b"go\n")

    async def close_stdin(self) -> None:
        await self._stdin.aclose()

    async def result(self, timeout: float = 600.0) -> dict[str, Any]:
        """Its JSON result, once it has exited 0."""
        with trio.fail_after(timeout):
            line = await self._line()
            code = await self.process.wait()
        if code != 0:
            raise ClientFailed(f"{self.name} exited {code}")
        result: dict[str, Any] = json.loads(line)
        return result


@asynccontextmanager
async def client_process(module: str, args: list[str]) -> AsyncIterator[ClientProcess]:
    """``benchmarks.streams.<module>`` with ``args``, killed if still running at the end."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", f"benchmarks.streams.{module}", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        yield ClientProcess(module, process)
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                with trio.CancelScope(shield=True):
                    await pipe.aclose()
