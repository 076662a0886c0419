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
from .wire import Body, End, Head, ResponseParser, WireError, payload, request

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


class _Window:
    """Where answers count: ``opens`` to ``closes`` (timed), or ``go`` onwards (counted);
    the answers in it, the last answer, and this process's CPU clock at its ends."""

    __slots__ = ("answered", "closes", "cpu_close", "cpu_open", "last_answer", "opens", "started")

    def __init__(self, warmup: float, duration: float | None) -> None:
        self.started = time.monotonic()
        self.opens = self.started + warmup if duration is not None else self.started
        self.closes = self.opens + duration if duration is not None else float("inf")
        self.answered = 0
        self.cpu_open = time.process_time() if duration is None else 0.0
        self.cpu_close = 0.0
        self.last_answer = self.started

    def tick(self, now: float) -> None:
        """Read the CPU clock the first time ``now`` is in or past the window."""
        if not self.cpu_open and now >= self.opens:
            self.cpu_open = time.process_time()

    def answer(self, now: float) -> None:
        """An append answered at ``now``: counted if in the window; the first answer after
        it reads the CPU clock."""
        self.last_answer = now
        if self.opens <= now < self.closes:
            self.answered += 1
        if now >= self.closes and not self.cpu_close:
            self.cpu_close = time.process_time()


class _Appender:
    """The streams' connections on one ``epoll``, each a closed loop of appends."""

    def __init__(self, server: Server, streams: list[_Stream], size: int, producer: bool) -> None:
        self.server = server
        self.streams = streams
        self.size = size
        self.producer = producer
        self.ok = (200,) if producer else (200, 204)
        self.by_fd = {stream.sock.fileno(): stream for stream in streams}
        self.poller = select.epoll()
        for fd in self.by_fd:
            self.poller.register(fd, select.EPOLLIN)
        self.headers = dict(server.headers, **{"Content-Type": "application/octet-stream"})

    def send(self, stream: _Stream) -> None:
        """Send ``stream``'s next append."""
        extra = dict(self.headers)
        if self.producer:
            extra.update(
                {
                    "Producer-Id": f"bench-{stream.index}",
                    "Producer-Epoch": "0",
                    "Producer-Seq": str(stream.sent),
                }
            )
        body = payload(stream.index, stream.sent, self.size)
        server = self.server
        stream.sock.sendall(
            request("POST", server.target(stream.name), server.authority, extra, body)
        )
        stream.sent += 1

    def run(self, window: _Window, appends: int | None) -> None:
        """Send every stream's first append, then its next one as each is answered: while
        the window is open (``appends`` None), or until it had ``appends``. Returns once
        the last append of every stream is answered; a failed one ends the process."""
        in_flight = len(self.streams)
        for stream in self.streams:
            self.send(stream)
        while in_flight:
            window.tick(time.monotonic())
            for fd, _ in self.poller.poll(0.05):
                stream = self.by_fd[fd]
                events = self._receive(stream)
                now = time.monotonic()
                for event in events:
                    if isinstance(event, Head):
                        stream.status = event.status
                        stream.closing = event.headers.get("connection", "").lower() == "close"
                    elif isinstance(event, End):
                        if stream.closing:  # Hypercorn does after 1000 requests, by default
                            self._reconnect(stream, fd)
                        if stream.status not in self.ok:
                            fail(f"append {stream.sent - 1} to {stream.name}: {stream.status}")
                        window.answer(now)
                        if (appends is None and now < window.closes) or (
                            appends is not None and stream.sent < appends
                        ):
                            self.send(stream)
                        else:
                            in_flight -= 1

    def close(self) -> None:
        """Close the connections and the ``epoll``."""
        for stream in self.streams:
            stream.sock.close()
        self.poller.close()

    def _receive(self, stream: _Stream) -> list[Head | Body | End]:
        """What ``stream``'s connection has; the server closing it ends the process."""
        data = stream.sock.recv(65536)
        events = stream.parser.feed(data) if data else stream.parser.eof()
        if not data and not events:
            fail(f"{self.server.authority} closed the connection of {stream.name}")
        return events

    def _reconnect(self, stream: _Stream, fd: int) -> None:
        """Replace ``stream``'s connection (on ``fd``), which the server closes."""
        self.poller.unregister(fd)
        del self.by_fd[fd]
        stream.sock.close()
        stream.sock = self.server.connect()
        stream.parser = ResponseParser()
        self.by_fd[stream.sock.fileno()] = stream
        self.poller.register(stream.sock.fileno(), select.EPOLLIN)


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
    """Connect, say ready, wait for go, run the loops; the result the module docstring
    describes."""
    streams = [_Stream(server, f"{name}{i}", i) for i in range(first, first + count)]
    appender = _Appender(server, streams, size, producer)
    say_ready()
    wait_for_go()
    window = _Window(warmup, duration)
    appender.run(window, appends)
    if duration is None:
        seconds = window.last_answer - window.started
        cpu_close = time.process_time()
        in_window = sum(stream.sent for stream in streams)
    else:
        seconds = duration
        cpu_close = window.cpu_close or time.process_time()
        in_window = window.answered
    appender.close()
    return {
        "appended": {stream.index: stream.sent for stream in streams},
        "window_appends": in_window,
        "window_seconds": seconds,
        "cpu_seconds": cpu_close - window.cpu_open,
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
