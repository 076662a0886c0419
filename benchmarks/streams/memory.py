"""Memory per idle SSE subscriber: the server's RSS with N subscribers holding a live
read of a quiet stream, minus without them, over N.

Per server: a ``text/plain`` stream with one append; 10 subscribers connect, catch
up and leave (so that what a first subscriber loads is loaded); after ``settle`` s,
the RSS of the server's process and its children (``/proc/<pid>/status``); then
``subscribers`` connect (:mod:`.subscribers` ``--idle``), each up to date, and after
``settle`` s the RSS again.
"""

from __future__ import annotations

from typing import Any

import trio

from benchmarks.support.report import progress
from benchmarks.support.servers import http1_client

from .processes import client_process
from .protocol import append, create
from .servers import StreamServer, tree_rss
from .wire import payload

__all__ = ["measure"]

STREAM = "memory"
WARM_UP_SUBSCRIBERS = 10


async def _hold(server: StreamServer, subscribers: int, size: int, settle: float) -> int:
    """The server's RSS with ``subscribers`` idle ones, ``settle`` s after they caught up."""
    args = server.client_arguments(
        "--stream", STREAM, "--connections", str(subscribers), "--idle", "--size", str(size),
    )  # fmt: skip
    async with client_process("subscribers", args) as proc:
        await proc.ready()
        await trio.sleep(settle)
        rss = tree_rss(server.pid)
        await proc.close_stdin()
        await proc.result()
    return rss


async def _one(server: StreamServer, subscribers: int, size: int, settle: float) -> dict[str, Any]:
    async with http1_client(server.url, timeout=120) as http:
        await create(http, server, STREAM, "text/plain")
        await append(http, server, STREAM, "text/plain", payload(0, 0, size))
    await _hold(server, WARM_UP_SUBSCRIBERS, size, 0)
    await trio.sleep(settle)
    before = tree_rss(server.pid)
    during = await _hold(server, subscribers, size, settle)
    return {
        "subscribers": subscribers,
        "rss_mib": before / 2**20,
        "rss_with_mib": during / 2**20,
        "kib_per_subscriber": (during - before) / subscribers / 1024,
    }


async def measure(
    servers: list[StreamServer], *, subscribers: int, size: int, settle: float
) -> dict[str, Any]:
    results = {}
    for server in servers:
        progress(f"memory: {server.name}, {subscribers} idle subscribers")
        results[server.name] = result = await _one(server, subscribers, size, settle)
        progress(
            f"  {result['rss_mib']:.1f} MiB -> {result['rss_with_mib']:.1f} MiB: "
            f"{result['kib_per_subscriber']:.1f} KiB each"
        )
    return results
