"""The official Durable Streams clients as followers of one stream, each a real
subprocess that prints what it receives as JSON lines, and the test's view of them.

::

    follower = await start_follower(nursery, node, "python", url, live="sse", json=False)
    await follower.wait_ready()                     # its first response is in
    await follower.wait_received(b"hello")          # delivered live, in order
    end = await follower.wait_end()                 # {"streamClosed": ...}, exited 0

``node`` runs tests/node/durable_streams/follow_client.mjs (``@durable-streams/client``),
``python`` runs python_follower.py beside this file (PyPI ``durable-streams``); both
print the same lines. Each wait fails after a deadline, or when the client exits first
(with its last lines, stderr too). The process is killed when ``nursery`` is cancelled.
"""

from __future__ import annotations

import base64
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

import trio

from benchmarks.support.reference_server import NODE_DIR
from benchmarks.support.server_process import ServerProcess

__all__ = ["CLIENTS", "Follower", "start_follower"]

Client = Literal["node", "python"]
CLIENTS: Final[tuple[Client, ...]] = ("node", "python")
_SCRIPTS: Final = {
    "node": NODE_DIR / "durable_streams" / "follow_client.mjs",
    "python": Path(__file__).with_name("python_follower.py"),
}
DEADLINE: Final = 30.0
"""Seconds any one wait may take on a loaded CI machine."""


class Follower:
    """A running client: the lines it printed so far, and its exit status once gone."""

    def __init__(self, child: ServerProcess) -> None:
        self._child = child
        self._lines: list[dict[str, Any]] = []

    @property
    def lines(self) -> list[dict[str, Any]]:
        """Each JSON line it printed so far."""
        printed = self._child.stdout
        self._lines += [json.loads(line) for line in printed[len(self._lines) :]]
        return self._lines

    @property
    def data(self) -> bytes:
        """Every byte delivered so far, in order."""
        return b"".join(base64.b64decode(line["data"]) for line in self.lines if "data" in line)

    @property
    def items(self) -> list[Any]:
        """Every JSON message delivered so far, in order."""
        return [item for line in self.lines if "items" in line for item in line["items"]]

    @property
    def live_modes(self) -> list[str | None]:
        """The ``live`` parameter of each request the client sent."""
        return [line["request"]["live"] for line in self.lines if "request" in line]

    async def wait_ready(self) -> None:
        await self._wait_for(lambda: any("ready" in line for line in self.lines), "ready")

    async def wait_received(self, data: bytes) -> None:
        await self._wait_for(lambda: self.data == data, f"the bytes {data!r}")

    async def wait_items(self, items: list[Any]) -> None:
        await self._wait_for(lambda: self.items == items, f"the messages {items!r}")

    async def wait_end(self) -> dict[str, Any]:
        """The client's ``end`` line, once it has exited with status 0."""
        await self._wait_for(self._child.exited.is_set, "its end")
        assert self._child.process.returncode == 0, self._child.stderr
        [end] = [line["end"] for line in self.lines if "end" in line]
        return dict(end)

    async def _wait_for(self, done: Callable[[], bool], what: str) -> None:
        await self._child.wait_for(done, what, DEADLINE)


async def start_follower(
    nursery: trio.Nursery,
    node: Path,
    client: Client,
    url: str,
    *,
    live: str,
    json_mode: bool,
    token: str | None,
) -> Follower:
    """Start ``client`` following the stream at ``url`` in ``live`` mode."""
    options = json.dumps({"url": url, "live": live, "json": json_mode, "token": token})
    program = str(node) if client == "node" else sys.executable
    process = await ServerProcess.start(
        nursery,
        [program, str(_SCRIPTS[client]), options],
        listening=None,
        capture="both",
        cwd=NODE_DIR,
        stop_signal=signal.SIGKILL,
    )
    return Follower(process)
