"""The append load: one keep-alive connection per stream, each a closed loop of POSTs.

``.venv/bin/python -m benchmarks.streams.appender URL --name NAME --first I --streams N
--size BYTES (--duration S --warmup S | --appends N) [--producer] [--header 'Name: value']``

Streams ``NAME<I>`` … ``NAME<I+N-1>`` (created already). Each connection sends its
next append (:func:`~benchmarks.streams.wire.payload`: stream number, sequence number)
as soon as the last one is answered; one thread and one ``epoll`` serve them all.
``--producer`` adds the idempotent producer headers (``Producer-Id`` per stream, epoch
0, ``Producer-Seq`` counting from 0), whose fresh appends must be answered 200, not
204 (a duplicate).

Timed (``--duration``): the appends answered within the window that opens
``--warmup`` s after ``go`` count; no new append is sent after it closes, those in
flight are still awaited. Counted (``--appends``): each stream gets that many, the
window is ``go`` to the last answer. Prints ``ready`` once connected, then the JSON
result: the appends each stream got, those in the window, its seconds, and this
process's CPU seconds in it. A status other than success ends the process (exit 1).
"""

from __future__ import annotations

import argparse
import select
import sys
import time

from .client import (
    Server,
    add_server_arguments,
    fail,
    report,
    say_ready,
    server_from,
    wait_for_go,
)
from .wire import End, Head, ResponseParser, WireError, payload, request

__all__ = ["main", "run"]


class _Stream:
    __slots__ = ("closing", "index", "name", "parser", "sent", "sock", "status")

    def __init__(self, server: Server, name: str, index: int) -> None:
        self.name = name
        self.index = index
        self.sock = server.connect()
        self.parser = ResponseParser()
        self.sent = 0  # appends sent; the last one may be unanswered
        self.status = 0
        self.closing = False  # the server said it closes the connection after this answer


def run(
    server: Server,
    name: str,
    first: int,
    count: int,
    size: int,
    producer: bool,
    duration: float | None,
    warmup: float,
    appends: int | None,
) -> dict[str, object]:
    streams = [_Stream(server, f"{name}{i}", i) for i in range(first, first + count)]
    by_fd = {stream.sock.fileno(): stream for stream in streams}
    poller = select.epoll()
    for fd in by_fd:
        poller.register(fd, select.EPOLLIN)
    headers = dict(server.headers, **{"Content-Type": "application/octet-stream"})
    say_ready()
    wait_for_go()

    def send(stream: _Stream) -> None:
        extra = dict(headers)
        if producer:
            extra.update(
                {
                    "Producer-Id": f"bench-{stream.index}",
                    "Producer-Epoch": "0",
                    "Producer-Seq": str(stream.sent),
                }
            )
        body = payload(stream.index, stream.sent, size)
        stream.sock.sendall(
            request("POST", server.target(stream.name), server.authority, extra, body)
        )
        stream.sent += 1

    started = time.monotonic()
    opens = started + warmup if duration is not None else started
    closes = opens + duration if duration is not None else float("inf")
    in_window = 0
    cpu_open = time.process_time() if duration is None else 0.0
    cpu_close = 0.0
    last_answer = started
    in_flight = len(streams)
    for stream in streams:
        send(stream)
    while in_flight:
        now = time.monotonic()
        if not cpu_open and now >= opens:
            cpu_open = time.process_time()
        for fd, _ in poller.poll(0.05):
            stream = by_fd[fd]
            data = stream.sock.recv(65536)
            events = stream.parser.feed(data) if data else stream.parser.eof()
            if not data and not events:
                fail(f"{server.authority} closed the connection of {stream.name}")
            now = time.monotonic()
            for event in events:
                if isinstance(event, Head):
                    stream.status = event.status
                    stream.closing = event.headers.get("connection", "").lower() == "close"
                elif isinstance(event, End):
                    if stream.closing:  # Hypercorn does after 1000 requests, by default
                        poller.unregister(fd)
                        del by_fd[fd]
                        stream.sock.close()
                        stream.sock = server.connect()
                        stream.parser = ResponseParser()
                        by_fd[stream.sock.fileno()] = stream
                        poller.register(stream.sock.fileno(), select.EPOLLIN)
                    ok = (200,) if producer else (200, 204)
                    if stream.status not in ok:
                        fail(f"append {stream.sent - 1} to {stream.name}: {stream.status}")
                    last_answer = now
                    if opens <= now < closes:
                        in_window += 1
                    if now >= closes and not cpu_close:
                        cpu_close = time.process_time()
                    if (appends is None and now < closes) or (
                        appends is not None and stream.sent < appends
                    ):
                        send(stream)
                    else:
                        in_flight -= 1
    if duration is None:
        seconds = last_answer - started
        cpu_close = time.process_time()
        in_window = sum(stream.sent for stream in streams)
    else:
        seconds = duration
        cpu_close = cpu_close or time.process_time()
    for stream in streams:
        stream.sock.close()
    poller.close()
    return {
        "appended": {stream.index: stream.sent for stream in streams},
        "window_appends": in_window,
        "window_seconds": seconds,
        "cpu_seconds": cpu_close - cpu_open,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.streams.appender")
    add_server_arguments(parser)
    parser.add_argument("--name", required=True, help="the streams' name before their number")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--producer", action="store_true")
    parser.add_argument("--duration", type=float)
    parser.add_argument("--warmup", type=float, default=0.0)
    parser.add_argument("--appends", type=int)
    args = parser.parse_args(argv)
    if (args.duration is None) == (args.appends is None):
        parser.error("give --duration or --appends")
    try:
        result = run(
            server_from(args),
            args.name,
            args.first,
            args.streams,
            args.size,
            args.producer,
            args.duration,
            args.warmup,
            args.appends,
        )
    except (OSError, ValueError, WireError) as exc:
        fail(f"appender: {exc!r}")
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
