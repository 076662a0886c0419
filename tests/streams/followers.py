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
(with its stderr). The process is killed when ``nursery`` is cancelled.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import trio

from benchmarks.support.reference_server import NODE_DIR

__all__ = ["CLIENTS", "Follower", "start_follower"]

Client = Literal["node", "python"]
CLIENTS: Final[tuple[Client, ...]] = ("node", "python")
_SCRIPTS: Final = {
    "node": NODE_DIR / "durable_streams" / "follow_client.mjs",
    "python": Path(__file__).with_name("python_follower.py"),
}
DEADLINE: Final = 30.0
"""Seconds any one wait may take on a loaded CI machine."""


@dataclass
class Follower:
    """A running client: the lines it printed so far, and its exit status once gone."""

    process: trio.Process
    lines: list[dict[str, Any]] = field(default_factory=list)
    stderr: bytearray = field(default_factory=bytearray)
    changed: trio.Event = field(default_factory=trio.Event)
    exited: bool = False

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
        await self._wait_for(lambda: self.exited, "its end")
        assert self.process.returncode == 0, self._story("exited with an error")
        [end] = [line["end"] for line in self.lines if "end" in line]
        return dict(end)

    async def _wait_for(self, done: Callable[[], bool], what: str) -> None:
        with trio.move_on_after(DEADLINE):
            while not done():
                if self.exited:
                    raise AssertionError(self._story(f"exited before {what}"))
                await self.changed.wait()
        if not done():
            raise AssertionError(self._story(f"no {what} after {DEADLINE} s"))

    def _story(self, what: str) -> str:
        printed = "\n".join(json.dumps(line) for line in self.lines)
        return f"the client {what}; it printed:\n{printed}\nstderr: {self.stderr.decode()}"

    def _changed(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


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
    process = await trio.lowlevel.open_process(
        [program, str(_SCRIPTS[client]), options],
        cwd=NODE_DIR,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    follower = Follower(process)

    async def read_stdout() -> None:
        assert process.stdout is not None
        pending = b""
        async with process.stdout:
            while chunk := await process.stdout.receive_some():
                *complete, pending = (pending + chunk).split(b"\n")
                follower.lines += [json.loads(line) for line in complete]
                follower._changed()

    async def read_stderr() -> None:
        assert process.stderr is not None
        async with process.stderr:
            while chunk := await process.stderr.receive_some():
                follower.stderr.extend(chunk)

    async def supervise() -> None:
        try:
            async with trio.open_nursery() as inner:
                inner.start_soon(read_stdout)
                inner.start_soon(read_stderr)
                await process.wait()
        finally:
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            follower.exited = True
            follower._changed()

    nursery.start_soon(supervise)
    return follower
