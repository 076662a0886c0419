"""The Node reference server of Durable Streams (``@durable-streams/server``, file-backed)
as a real subprocess on a free loopback port, for comparison with sandstream's.

::

    url = await start_reference_server(nursery, node, data_dir)   # http://127.0.0.1:PORT

The server is tests/node/durable_streams/reference_server.mjs. It runs until
``nursery`` is cancelled, then stops: SIGTERM (it closes its live connections), SIGKILL
after a grace period. Its output is drained as long as it runs (it logs to stdout) and
shown in the error raised when it exits before it listens.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Final

import trio

__all__ = ["NODE_DIR", "start_reference_server"]

NODE_DIR: Final = Path(__file__).resolve().parents[1] / "node"
_SCRIPT: Final = NODE_DIR / "durable_streams" / "reference_server.mjs"
_DEADLINE: Final = 30.0
"""Seconds to start or to stop, on a loaded CI machine."""


async def start_reference_server(
    nursery: trio.Nursery, node: Path, data_dir: Path, *, long_poll_timeout_ms: int = 500
) -> str:
    """Serve the reference server with its data in ``data_dir`` as long as ``nursery``
    runs; return its base URL once it listens.

    ``long_poll_timeout_ms``: how long a live long-poll waits for data (the reference's
    own conformance run uses 500 ms; its default is 30 s).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    options = {"dataDir": str(data_dir), "port": 0, "longPollTimeout": long_poll_timeout_ms}
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
    return url


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
