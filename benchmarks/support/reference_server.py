"""The Node reference server of Durable Streams (``@durable-streams/server``) as a real
subprocess on a free loopback port, for comparison with sandstream's.

::

    server = await start_reference_server(nursery, node, data_dir)
    server.url                                             # http://127.0.0.1:PORT

The server is tests/node/durable_streams/reference_server.mjs (where tests/node's npm
packages are), file-backed in ``data_dir``, or in memory without one. It runs until
``nursery`` is cancelled or :meth:`ReferenceServer.stop`, then stops: SIGTERM (it
closes its live connections), SIGKILL after a grace period. Its output is drained as
long as it runs (it logs to stdout) and shown in the error raised when it exits before
it listens.
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

__all__ = ["NODE_DIR", "ReferenceServer", "start_reference_server"]

NODE_DIR: Final = Path(__file__).resolve().parents[2] / "tests" / "node"
_SCRIPT: Final = NODE_DIR / "durable_streams" / "reference_server.mjs"
_DEADLINE: Final = 30.0
"""Seconds to start or to stop, on a loaded CI machine."""


@dataclass(frozen=True)
class ReferenceServer:
    """A running reference server: its base URL and its process."""

    url: str
    process: trio.Process

    async def stop(self) -> None:
        """Stop it now, rather than when its nursery is cancelled."""
        await _stop(self.process)


async def start_reference_server(
    nursery: trio.Nursery,
    node: Path,
    data_dir: Path | None,
    *,
    long_poll_timeout_ms: int | None = 500,
) -> ReferenceServer:
    """Serve the reference server with its data in ``data_dir`` (``None``: in memory) as
    long as ``nursery`` runs; return it once it listens.

    ``long_poll_timeout_ms``: how long a live long-poll waits for data (the reference's
    own conformance run uses 500 ms; ``None``: its default, 30 s).
    """
    options: dict[str, object] = {"port": 0}
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        options["dataDir"] = str(data_dir)
    if long_poll_timeout_ms is not None:
        options["longPollTimeout"] = long_poll_timeout_ms
    process = await trio.lowlevel.open_process(
        [str(node), str(_SCRIPT), json.dumps(options)],
        cwd=NODE_DIR,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output = bytearray()
    announced = trio.Event()  # set when the URL is out, or the output ended without it

    async def drain() -> None:
        assert process.stdout is not None
        async with process.stdout:
            while chunk := await process.stdout.receive_some():
                output.extend(chunk)
                if _announced_url(output):
                    announced.set()
        announced.set()

    async def supervise() -> None:
        try:
            async with trio.open_nursery() as inner:
                inner.start_soon(drain)
                await process.wait()
        finally:
            with trio.CancelScope(shield=True):
                await _stop(process)

    nursery.start_soon(supervise)
    with trio.fail_after(_DEADLINE):
        await announced.wait()
    url = _announced_url(output)
    if not url:
        raise AssertionError(f"the reference server exited: {output.decode(errors='replace')}")
    return ReferenceServer(url, process)


def _announced_url(output: bytearray) -> str:
    """The URL of the ``{"url": ...}`` line, once the output has it."""
    for line in bytes(output).splitlines(keepends=True):
        if line.startswith(b'{"url"') and line.endswith(b"\n"):
            found: str = json.loads(line)["url"]
            return found
    return ""


async def _stop(process: trio.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(_DEADLINE):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
