"""Append throughput: small appends to many streams at once, plain and as idempotent
producers.

Per server and round, ``streams`` new ``application/octet-stream`` streams get
``size``-byte appends from :mod:`.appender` processes (``clients`` of them, the streams
split between them), one connection per stream, for ``warmup`` + ``duration`` s; the
appends answered in the window count. Then every stream is read back whole and must
hold exactly the appends its client was told were made, in order. Rounds alternate
the order of the servers; the medians are reported, with the server's CPU and the
clients' (% of one core) over the window, and every append answered (``appends``, in
or out of the window).
"""

from __future__ import annotations

import statistics
from typing import Any

import trio

from benchmarks.support.report import progress
from benchmarks.support.servers import http1_client

from .processes import ClientProcess, client_process
from .protocol import ProtocolError, create, read_all
from .servers import StreamServer, tree_cpu
from .wire import payload

__all__ = ["MODES", "measure"]

MODES = ("plain", "producer")


async def _one(
    server: StreamServer,
    name: str,
    producer: bool,
    streams: int,
    clients: int,
    size: int,
    duration: float,
    warmup: float,
) -> dict[str, float]:
    async with http1_client(server.url, timeout=120) as http:
        for i in range(streams):
            await create(http, server, f"{name}{i}", "application/octet-stream")
        share = -(-streams // clients)
        results: list[dict[str, Any]] = []
        async with trio.open_nursery() as nursery:
            procs: list[ClientProcess] = []
            for first in range(0, streams, share):
                args = server.client_arguments(
                    "--name", name, "--first", str(first),
                    "--streams", str(min(share, streams - first)), "--size", str(size),
                    "--duration", str(duration), "--warmup", str(warmup),
                )  # fmt: skip
                if producer:
                    args.append("--producer")
                procs.append(await nursery.start(_run_client, args, results))
            for proc in procs:
                await proc.go()
            await trio.sleep(warmup)
            cpu = tree_cpu(server.pid)
            await trio.sleep(duration)
            server_cpu = tree_cpu(server.pid) - cpu
        appended: dict[int, int] = {}
        for result in results:
            appended.update({int(i): n for i, n in result["appended"].items()})
        for i, count in appended.items():
            got = await read_all(http, server, f"{name}{i}")
            want = b"".join(payload(i, seq, size) for seq in range(count))
            if got != want:
                raise ProtocolError(
                    f"{server.name}: stream {name}{i} holds {len(got)} bytes, not the "
                    f"{len(want)} of its {count} appends in order"
                )
    rate = sum(r["window_appends"] for r in results) / duration
    return {
        "appends": sum(appended.values()),
        "appends_per_s": rate,
        "mb_per_s": rate * size / 1e6,
        "server_cpu_percent": server_cpu / duration * 100,
        "client_cpu_percent": sum(r["cpu_seconds"] for r in results) / duration * 100,
    }


async def _run_client(
    args: list[str],
    results: list[dict[str, Any]],
    *,
    task_status: trio.TaskStatus[ClientProcess] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with client_process("appender", args) as proc:
        await proc.ready()
        task_status.started(proc)
        results.append(await proc.result())


async def measure(
    servers: list[StreamServer],
    *,
    streams: int,
    clients: int,
    size: int,
    duration: float,
    warmup: float,
    repeat: int,
) -> dict[str, Any]:
    """Per mode and server, the medians over ``repeat`` rounds."""
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        mode: {server.name: [] for server in servers} for mode in MODES
    }
    for round_ in range(repeat):
        order = servers if round_ % 2 == 0 else servers[::-1]
        for server in order:
            for mode in MODES:
                progress(
                    f"append round {round_ + 1}/{repeat}: {server.name}, {mode}, {streams} "
                    f"streams, {warmup:g} + {duration:g} s"
                )
                name = f"append-{mode}-{round_}-"
                run = await _one(
                    server, name, mode == "producer", streams, clients, size, duration, warmup
                )
                runs[mode][server.name].append(run)
                progress(
                    f"  {run['appends_per_s']:,.0f} appends/s, server CPU "
                    f"{run['server_cpu_percent']:.0f}%, clients' {run['client_cpu_percent']:.0f}%"
                )
    return {
        "streams": streams,
        "size": size,
        "clients": clients,
        "duration": duration,
        "repeat": repeat,
        **{
            mode: {name: _medians(rounds) for name, rounds in by_server.items()}
            for mode, by_server in runs.items()
        },
    }


def _medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
