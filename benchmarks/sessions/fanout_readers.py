"""The fan-out benchmark's readers: N SSE connections to one session, in their own process.

``.venv/bin/python -m benchmarks.sessions.fanout_readers URL SESSION_ID READERS
--warmup S --duration S``

One thread, one ``epoll``, non-blocking sockets, no event loop library: per received
block, one ``recv`` and one regex over it, so that a thousand readers of a session at
50 chunks/s cost a few percent of a core and never become what is measured. Each
``"ts":<ms>`` in a block (stamped by the container as it wrote the line) gives one
latency, the block's receive time minus that stamp.

Prints ``measuring`` on a line when the window opens (``--warmup`` seconds after every
reader received its first frame), then, ``--duration`` seconds later, one JSON object:
the latencies' percentiles, their count and this process's CPU over the window.
Exits 1 if the readers do not all get a frame within ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import re
import select
import socket
import sys
import time
from typing import Final

from benchmarks.runner.support import TOKEN, percentile

_TS: Final = re.compile(rb'"ts":(\d+)')


def _connect(host: str, port: int, session_id: str) -> socket.socket:
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(
        (
            f"GET /sessions/{session_id}/stream?cursor=0 HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
    )
    sock.setblocking(False)
    return sock


def run(
    url: str, session_id: str, readers: int, warmup: float, duration: float, timeout: float
) -> dict[str, object]:
    host, port = url.removeprefix("http://").split(":")
    sockets = {}
    poller = select.epoll()
    for _ in range(readers):
        sock = _connect(host, int(port), session_id)
        sockets[sock.fileno()] = sock
        poller.register(sock.fileno(), select.EPOLLIN)
    waiting = set(sockets)  # no frame yet
    latencies: list[float] = []
    give_up = time.monotonic() + timeout
    opens = closes = 0.0
    cpu_before = 0.0
    while True:
        now = time.monotonic()
        if waiting and now > give_up:
            raise SystemExit(f"{len(waiting)} readers got no frame in {timeout} s")
        if closes and now >= closes:
            break
        if opens and now >= opens and not cpu_before:
            cpu_before = time.process_time()
            print("measuring", flush=True)
        measuring = bool(cpu_before)
        for fd, _ in poller.poll(0.05):
            data = sockets[fd].recv(65536)
            if not data:
                raise SystemExit("a reader's stream ended before the window closed")
            received_ms = time.time() * 1000
            if measuring:
                latencies.extend(received_ms - int(ts) for ts in _TS.findall(data))
            elif fd in waiting and b"\ndata: " in data:
                waiting.discard(fd)
                if not waiting:
                    opens = time.monotonic() + warmup
                    closes = opens + duration
    cpu = (time.process_time() - cpu_before) / duration * 100
    for sock in sockets.values():
        sock.close()
    poller.close()
    return {
        "lines_measured": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies), 2) if latencies else None,
        "client_cpu_percent": round(cpu),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=".venv/bin/python -m benchmarks.sessions.fanout_readers")
    parser.add_argument("url")
    parser.add_argument("session_id")
    parser.add_argument("readers", type=int)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    result = run(args.url, args.session_id, args.readers, args.warmup, args.duration, args.timeout)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
