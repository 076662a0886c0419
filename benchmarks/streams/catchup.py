"""Catch-up read: one large stream read from its start to its end.

Per server, untimed set-up: a new ``application/octet-stream`` stream gets ``mb`` MB
in appends of ``size`` bytes (64 KiB), one after the other over one connection
(:mod:`.appender`; its MB/s is reported too, as *write*). Then ``repeat`` rounds,
alternating the servers' order: a :mod:`.reader` process reads the whole stream
from ``-1`` following ``Stream-Next-Offset`` and checks every byte. Reported: the
median MB/s, the requests a read took, the server's and the reader's CPU.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.support.report import progress
from benchmarks.support.servers import http1_client

from .processes import client_process
from .protocol import create
from .servers import StreamServer, tree_cpu

__all__ = ["STREAM", "measure"]

STREAM = "catchup-0"


async def _fill(server: StreamServer, appends: int, size: int) -> float:
    """Write the stream; its MB/s."""
    async with http1_client(server.url, timeout=120) as http:
        await create(http, server, STREAM, "application/octet-stream")
    args = server.client_arguments(
        "--name", "catchup-", "--streams", "1", "--size", str(size), "--appends", str(appends),
    )  # fmt: skip
    async with client_process("appender", args) as proc:
        await proc.ready()
        await proc.go()
        result = await proc.result()
    mb_per_s: float = appends * size / 1e6 / result["window_seconds"]
    return mb_per_s


async def _read(server: StreamServer, appends: int, size: int) -> dict[str, float]:
    args = server.client_arguments(
        "--stream", STREAM, "--appends", str(appends), "--size", str(size),
    )  # fmt: skip
    async with client_process("reader", args) as proc:
        await proc.ready()
        cpu = tree_cpu(server.pid)
        await proc.go()
        result = await proc.result()
        server_cpu = tree_cpu(server.pid) - cpu
    seconds = result["seconds"]
    return {
        "mb_per_s": result["bytes"] / 1e6 / seconds,
        "requests": result["requests"],
        "server_cpu_percent": server_cpu / seconds * 100,
        "client_cpu_percent": result["cpu_seconds"] / seconds * 100,
    }


async def measure(
    servers: list[StreamServer], *, mb: float, size: int, repeat: int
) -> dict[str, Any]:
    appends = max(1, round(mb * 1e6 / size))
    write: dict[str, float] = {}
    for server in servers:
        progress(f"catch-up: writing {appends * size / 1e6:,.0f} MB to {server.name}")
        write[server.name] = await _fill(server, appends, size)
    reads: dict[str, list[dict[str, float]]] = {server.name: [] for server in servers}
    for round_ in range(repeat):
        for server in servers if round_ % 2 == 0 else servers[::-1]:
            progress(f"catch-up round {round_ + 1}/{repeat}: reading {server.name}")
            read = await _read(server, appends, size)
            reads[server.name].append(read)
            progress(f"  {read['mb_per_s']:,.1f} MB/s in {read['requests']:.0f} requests")
    return {
        "bytes": appends * size,
        "size": size,
        "repeat": repeat,
        "write_mb_per_s": write,
        "read": {
            name: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
            for name, rounds in reads.items()
        },
    }
