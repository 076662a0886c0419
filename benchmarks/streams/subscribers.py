"""Live SSE subscribers of one stream, many in one process: the fan-out's and memory's.

``.venv/bin/python -m benchmarks.streams.subscribers URL --stream NAME --connections N
(--messages M --size BYTES [--skip K] [--latencies FILE] | --idle)
[--header 'Name: value']``

Each connection reads ``NAME?offset=-1&live=sse`` (a ``text/plain`` stream); one
thread and one ``epoll`` serve them all. ``ready`` is printed once every connection
has had a ``control`` event saying it is up to date.

Fan-out (``--messages``): each connection must get the stream's appends (``--size``
bytes each, :func:`~benchmarks.streams.wire.payload`) numbered 0 to M-1, byte for
byte and in order, however the server groups them into ``data`` events, then a
``control`` event with ``streamClosed``. Per append and connection, latency = the
receive time of the block it completed in - the send time it carries
(``time.monotonic_ns()``, the same clock in every process); the first ``--skip``
appends are checked but not timed. The latencies (ms, float64) go to ``--latencies``;
stdout gets their count and percentiles, the reconnections, and this process's CPU
from the first append received to the last connection closed.

Idle (``--idle``): after ``ready``, the connections are held until stdin closes.

A response that ends without ``streamClosed`` is resumed from its last control
event's ``streamNextOffset``, as the protocol asks (a server may end an SSE response
at any time); they are counted. Anything else unexpected — a status other than 200,
a byte out of place, base64-encoded data, ``--timeout`` passing — ends the process
with exit 1 and a message.
"""

from __future__ import annotations

import argparse
import array
import select
import socket
import sys
import time
from urllib.parse import quote

import msgspec

from benchmarks.runner.support import percentile

from .client import (
    Server,
    add_server_arguments,
    fail,
    report,
    say_ready,
    server_from,
)
from .wire import (
    Body,
    Head,
    ResponseParser,
    SSESplitter,
    WireError,
    payload,
    payload_fields,
    request,
)

__all__ = ["main"]


class _Control(msgspec.Struct):
    streamNextOffset: str
    upToDate: bool = False
    streamClosed: bool = False


class _Subscriber:
    __slots__ = (
        "closed",
        "events",
        "index",
        "offset",
        "parser",
        "pending",
        "received",
        "sock",
        "up_to_date",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.offset = "-1"
        self.received = 0  # appends received whole
        self.pending = b""  # the start of the next one
        self.up_to_date = False
        self.closed = False
        self.sock: socket.socket | None = None
        self.parser = ResponseParser()
        self.events = SSESplitter()


class _Run:
    def __init__(
        self, server: Server, stream: str, size: int, skip: int, messages: int | None
    ) -> None:
        self.server = server
        self.stream = stream
        self.size = size
        self.skip = skip
        self.messages = messages
        self.poller = select.epoll()
        self.by_fd: dict[int, _Subscriber] = {}
        self.latencies = array.array("d")
        self.reconnects = 0
        self.ready = 0
        self.open = 0
        self.first_data = 0.0
        self.cpu_first = 0.0

    def connect(self, sub: _Subscriber) -> None:
        sock = self.server.connect()
        query = f"offset={quote(sub.offset, safe='')}&live=sse"
        sock.sendall(
            request(
                "GET",
                self.server.target(self.stream, query),
                self.server.authority,
                self.server.headers,
            )
        )
        sub.sock = sock
        sub.parser = ResponseParser()
        sub.events = SSESplitter()
        self.by_fd[sock.fileno()] = sub
        self.poller.register(sock.fileno(), select.EPOLLIN)
        self.open += 1

    def disconnect(self, sub: _Subscriber) -> None:
        assert sub.sock is not None
        self.poller.unregister(sub.sock.fileno())
        del self.by_fd[sub.sock.fileno()]
        sub.sock.close()
        sub.sock = None
        self.open -= 1

    def serve(self, timeout: float) -> None:
        """Read what has arrived, for up to ``timeout`` s."""
        for fd, _ in self.poller.poll(timeout):
            sub = self.by_fd.get(fd)
            if sub is None or sub.sock is None:
                continue
            data = sub.sock.recv(262144)
            received_ns = time.monotonic_ns()
            events = sub.parser.feed(data) if data else sub.parser.eof()
            ended = not data
            for event in events:
                if isinstance(event, Body):
                    self.take(sub, event.data, received_ns)
                elif isinstance(event, Head):
                    self.check_head(event)
                else:
                    ended = True
            if ended:  # by the response's framing or the connection's close
                self.disconnect(sub)
                if not sub.closed:
                    self.reconnects += 1
                    self.connect(sub)

    def check_head(self, head: Head) -> None:
        if head.status != 200:
            fail(f"{self.stream}: SSE answered {head.status}")
        kind = head.headers.get("content-type", "")
        if not kind.startswith("text/event-stream"):
            fail(f"{self.stream}: SSE answered with content type {kind!r}")
        if head.headers.get("stream-sse-data-encoding"):
            fail(f"{self.stream}: a text/plain stream's SSE data is encoded")

    def take(self, sub: _Subscriber, data: bytes, received_ns: int) -> None:
        for event in sub.events.feed(data):
            if event.name == b"data":
                self.append_data(sub, event.data, received_ns)
            elif event.name == b"control":
                control = msgspec.json.decode(event.data, type=_Control)
                sub.offset = control.streamNextOffset
                if control.upToDate and not sub.up_to_date:
                    sub.up_to_date = True
                    self.ready += 1
                if control.streamClosed:
                    sub.closed = True
                    if sub.pending or sub.received != self.messages:
                        fail(
                            f"subscriber {sub.index} closed after {sub.received} of "
                            f"{self.messages} appends (+{len(sub.pending)} bytes)"
                        )

    def append_data(self, sub: _Subscriber, data: bytes, received_ns: int) -> None:
        if not self.first_data:
            self.first_data = time.monotonic()
            self.cpu_first = time.process_time()
        size = self.size
        buffer = sub.pending + data if sub.pending else data
        whole = len(buffer) // size * size
        for start in range(0, whole, size):
            message = buffer[start : start + size]
            _, seq, sent_ns = payload_fields(message)
            if seq != sub.received or message != payload(0, seq, size, sent_ns):
                fail(f"subscriber {sub.index}: expected append {sub.received}, got {message!r}")
            sub.received += 1
            if seq >= self.skip:
                self.latencies.append((received_ns - sent_ns) / 1e6)
        sub.pending = buffer[whole:]


def run(
    server: Server,
    stream: str,
    connections: int,
    size: int,
    skip: int,
    messages: int | None,
    latencies_path: str | None,
    timeout: float,
) -> dict[str, object]:
    state = _Run(server, stream, size, skip, messages)
    subs = [_Subscriber(i) for i in range(connections)]
    for sub in subs:
        state.connect(sub)
    give_up = time.monotonic() + timeout
    while state.ready < connections:
        if time.monotonic() > give_up:
            fail(f"{connections - state.ready} subscribers were not up to date in {timeout} s")
        state.serve(0.05)
    say_ready()
    if messages is None:  # idle: hold them until stdin closes
        while not select.select([sys.stdin], [], [], 0)[0]:
            state.serve(0.2)
        for sub in subs:
            if sub.sock is not None:
                state.disconnect(sub)
        return {"connections": connections, "reconnects": state.reconnects}
    give_up = time.monotonic() + timeout
    while state.open:
        if time.monotonic() > give_up:
            done = sum(sub.closed for sub in subs)
            fail(f"only {done} of {connections} subscribers got the whole stream in {timeout} s")
        state.serve(0.05)
    seconds = time.monotonic() - state.first_data
    cpu = time.process_time() - state.cpu_first
    if latencies_path:
        with open(latencies_path, "wb") as file:
            state.latencies.tofile(file)
    values = state.latencies.tolist()
    return {
        "connections": connections,
        "appends_each": messages,
        "latencies": len(values),
        "p50_ms": percentile(values, 50),
        "p99_ms": percentile(values, 99),
        "max_ms": max(values, default=0.0),
        "reconnects": state.reconnects,
        "seconds": seconds,
        "cpu_seconds": cpu,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.streams.subscribers")
    add_server_arguments(parser)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--messages", type=int, help="appends to expect, then streamClosed")
    parser.add_argument("--idle", action="store_true", help="hold them until stdin closes")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--skip", type=int, default=0, help="appends checked, not timed")
    parser.add_argument("--latencies", help="write the latencies (ms, float64) here")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.idle == (args.messages is not None):
        parser.error("give --messages or --idle")
    try:
        result = run(
            server_from(args),
            args.stream,
            args.connections,
            args.size,
            args.skip,
            args.messages,
            args.latencies,
            args.timeout,
        )
    except (OSError, ValueError, WireError, msgspec.ValidationError) as exc:
        fail(f"subscribers: {exc!r}")
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
