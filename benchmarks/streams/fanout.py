"""Fan-out latency: one writer, N live SSE subscribers of its stream.

Per server and N (the ladder): a new ``text/plain`` stream; N subscribers
(:mod:`.subscribers`, in ``procs`` processes) read it with ``live=sse`` until each
is up to date; then this process makes ``rate`` * (``warmup`` + ``duration``) appends
over one raw keep-alive connection, ``rate`` a second at most (each is sent once the
one before is answered: a server slower than that sets a lower rate, which is
reported), each (``size`` bytes) carrying ``time.monotonic_ns()`` taken just before it
is sent, and then closes the stream. Every subscriber must get every append in order
and the close; latency per append and subscriber = its receipt - its send time, over
the appends after the warm-up. Reported: p50, p99, max; the server's CPU and the
subscribers' (% of one core) while the appends ran.
"""

from __future__ import annotations

import array
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio

from benchmarks.runner.support import percentile
from benchmarks.support.report import progress
from benchmarks.support.servers import http1_client

from .processes import ClientProcess, client_process
from .protocol import ProtocolError, close, create
from .servers import PREFIX, StreamServer, tree_cpu
from .wire import End, Head, ResponseParser, payload, request

__all__ = ["measure"]

TIMEOUT = 1200.0
"""Seconds the subscribers get to be up to date, and again to get the whole stream."""


async def _write(server: StreamServer, stream: str, count: int, rate: float, size: int) -> float:
    """``count`` appends at ``rate``/s at most (each sent once the one before is
    answered), each stamped with its send time; the seconds they took."""
    parts = urlsplit(server.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    headers = {**server.headers, "Content-Type": "text/plain"}
    sock: trio.SocketStream | None = None
    started = trio.current_time()
    try:
        for seq in range(count):
            await trio.sleep_until(started + seq / rate)
            if sock is None:
                sock = await trio.open_tcp_stream(host, port)
            sent_ns = time.monotonic_ns()
            body = payload(0, seq, size, sent_ns)
            await sock.send_all(request("POST", PREFIX + stream, parts.netloc, headers, body))
            head = await _answer(sock)
            if head is None:
                raise ProtocolError(f"{server.name} closed the writer's connection")
            if head.status not in (200, 204):
                raise ProtocolError(f"{server.name}: append {seq} to {stream}: {head.status}")
            if head.headers.get("connection", "").lower() == "close":
                await sock.aclose()
                sock = None
        return trio.current_time() - started
    finally:
        if sock is not None:
            await sock.aclose()


async def _answer(sock: trio.SocketStream) -> Head | None:
    """The head of the response read whole off ``sock``; None if it closed first."""
    parser = ResponseParser()
    head = None
    while True:
        data = await sock.receive_some(65536)
        for event in parser.feed(data) if data else parser.eof():
            if isinstance(event, Head):
                head = event
            elif isinstance(event, End):
                return head
        if not data:
            return None


async def _level(
    server: StreamServer,
    subscribers: int,
    procs: int,
    rate: float,
    duration: float,
    warmup: float,
    size: int,
    tmp: Path,
) -> dict[str, Any]:
    stream = f"fanout-{subscribers}"
    skip = round(rate * warmup)
    count = skip + round(rate * duration)
    results: list[dict[str, Any]] = []
    files = []
    async with http1_client(server.url, timeout=120) as http:
        await create(http, server, stream, "text/plain")
        async with trio.open_nursery() as nursery:
            started: list[ClientProcess] = []
            share = -(-subscribers // procs)
            for first in range(0, subscribers, share):
                files.append(tmp / f"{server.name}-{stream}-{first}.f64")
                args = server.client_arguments(
                    "--stream", stream, "--connections", str(min(share, subscribers - first)),
                    "--messages", str(count), "--size", str(size), "--skip", str(skip),
                    "--latencies", str(files[-1]), "--timeout", str(TIMEOUT),
                )  # fmt: skip
                started.append(await nursery.start(_run_subscribers, args, results))
            cpu = tree_cpu(server.pid)
            seconds = await _write(server, stream, count, rate, size)
            server_cpu = tree_cpu(server.pid) - cpu
            await close(http, server, stream)
    latencies = array.array("d")
    for file in files:
        latencies.frombytes(file.read_bytes())
        file.unlink()
    values = sorted(latencies)
    expected = subscribers * (count - skip)
    if len(values) != expected:
        raise ProtocolError(f"{server.name}: {len(values)} latencies, not {expected}")
    return {
        "subscribers": subscribers,
        "appends": count,
        "appends_per_s": (count - 1) / seconds if count > 1 else 0.0,
        "p50_ms": percentile(values, 50),
        "p99_ms": percentile(values, 99),
        "max_ms": values[-1],
        "reconnects": sum(r["reconnects"] for r in results),
        "server_cpu_percent": server_cpu / seconds * 100,
        "client_cpu_percent": sum(r["cpu_seconds"] for r in results) / seconds * 100,
    }


async def _run_subscribers(
    args: list[str],
    results: list[dict[str, Any]],
    *,
    task_status: trio.TaskStatus[ClientProcess] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with client_process("subscribers", args) as proc:
        await proc.ready(TIMEOUT)
        task_status.started(proc)
        results.append(await proc.result())


async def measure(
    servers: list[StreamServer],
    *,
    ladder: list[int],
    procs: int,
    rate: float,
    duration: float,
    warmup: float,
    size: int,
    tmp: Path,
) -> dict[str, Any]:
    """Per N of ``ladder`` and server, one level."""
    levels: dict[str, dict[str, Any]] = {}
    for index, subscribers in enumerate(ladder):
        order = servers if index % 2 == 0 else servers[::-1]
        for server in order:
            progress(
                f"fan-out: {server.name}, {subscribers} subscribers, {rate:g} appends/s for "
                f"{warmup:g} + {duration:g} s"
            )
            level = await _level(server, subscribers, procs, rate, duration, warmup, size, tmp)
            levels.setdefault(str(subscribers), {})[server.name] = level
            progress(
                f"  {level['appends_per_s']:.1f} appends/s, p50 {level['p50_ms']:.2f} ms, "
                f"p99 {level['p99_ms']:.2f} ms, server CPU {level['server_cpu_percent']:.0f}%, "
                f"subscribers' {level['client_cpu_percent']:.0f}%"
            )
    return {"rate": rate, "size": size, "duration": duration, "levels": levels}
