"""The Durable Streams servers the benchmark compares, each a process of its own on a
free loopback port with a fresh data directory, and what they cost the machine.

- ``reference``: the protocol's Node reference server, npm ``@durable-streams/server``
  (file-backed: a log file per stream, LMDB for metadata;
  :mod:`benchmarks.support.reference_server`, with tests/node's npm packages,
  installed by .dev/setup.sh's ``node_packages`` if missing), with its own defaults;
- ``sandstream``: ``sandstream runner --data-dir DIR`` (its streams at
  ``/v1/stream/{path}``, every request with the runner's bearer token);
- ``reference-memory``: the reference server with its in-memory store (nothing on
  disk), to tell its file store's costs from the rest of it.

Both serve streams under the same path prefix (the reference server takes any
path), so a client addresses them alike but for the headers. :func:`tree_rss` and
:func:`tree_cpu` read the server's process and its children from ``/proc``.

A server that does not start within 30 s raises; one that does not stop on SIGTERM
within 30 s is killed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil
import trio

from benchmarks.runner.support import TOKEN, start_runner_process
from benchmarks.support.reference_server import start_reference_server

__all__ = [
    "PREFIX",
    "TARGETS",
    "StreamServer",
    "install_reference",
    "start_server",
    "tree_cpu",
    "tree_rss",
]

ROOT: Final = Path(__file__).resolve().parents[2]
PREFIX: Final = "/v1/stream/"
TARGETS: Final = ("reference", "sandstream", "reference-memory")


@dataclass
class StreamServer:
    """A running server: its name (one of :data:`TARGETS`), base URL, the headers its
    requests need, its process id, and how to stop it."""

    name: str
    url: str
    headers: dict[str, str]
    pid: int
    stop: Callable[[], Awaitable[object]]

    def client_arguments(self, *extra: str) -> list[str]:
        """The arguments that point a client process (:mod:`.client`) at it, then ``extra``."""
        args = [self.url, "--prefix", PREFIX]
        for name, value in self.headers.items():
            args += ["--header", f"{name}: {value}"]
        return [*args, *extra]


def install_reference() -> None:
    """tests/node's npm packages, installed the way .dev/test does if they are missing."""
    subprocess.run(
        ["bash", "-c", "source .dev/setup.sh && node_packages >&2"], cwd=ROOT, check=True
    )


async def start_server(nursery: trio.Nursery, name: str, data_dir: Path) -> StreamServer:
    """Start the server ``name`` with ``data_dir`` (created) in ``nursery``."""
    data_dir.mkdir(parents=True)
    if name in ("reference", "reference-memory"):
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not installed (Debian: apt-get install nodejs)")
        store = data_dir if name == "reference" else None
        reference = await start_reference_server(
            nursery, Path(node), store, long_poll_timeout_ms=None
        )
        pid = reference.process.pid
        return StreamServer(name, reference.url, {}, pid, reference.stop)
    if name == "sandstream":
        runner = await start_runner_process(nursery, "--data-dir", str(data_dir))
        headers = {"Authorization": f"Bearer {TOKEN}"}
        return StreamServer(name, runner.url, headers, runner.process.pid, runner.stop)
    raise ValueError(f"no server {name!r}: one of {', '.join(TARGETS)}")


def _tree(pid: int) -> list[int]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [pid, *(child.pid for child in children)]


def tree_rss(pid: int) -> int:
    """Bytes resident (``VmRSS``) in process ``pid`` and its descendants."""
    total = 0
    for member in _tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        total += int(match.group(1)) * 1024 if match else 0
    return total


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` and its descendants."""
    total = 0.0
    for member in _tree(pid):
        try:
            times = psutil.Process(member).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total
