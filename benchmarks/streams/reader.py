"""The catch-up read: one stream from ``-1`` to its end, following ``Stream-Next-Offset``.

``.venv/bin/python -m benchmarks.streams.reader URL --stream NAME --appends N --size BYTES
[--header 'Name: value']``

The stream holds ``N`` appends of ``BYTES`` each, stream number 0
(:func:`~benchmarks.streams.wire.payload`), which this process lays out in memory
first. Then, on one keep-alive connection (opened again if the server closes it),
``GET NAME?offset=<o>`` from ``o = -1``, each time with the ``Stream-Next-Offset`` of
the answer before, until an answer says ``Stream-Up-To-Date``; timed from the first
request to the last byte, the bytes copied into a buffer as they arrive. Only then
are they compared with what was appended: all of it, in order, nothing more.

Prints ``ready`` before the read, waits for ``go``, then the JSON result: bytes,
seconds, requests, this process's CPU seconds. A status other than 200, a missing
``Stream-Next-Offset`` or a byte out of place ends it with exit 1.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from urllib.parse import quote

from .client import (
    Server,
    add_server_arguments,
    fail,
    report,
    say_ready,
    server_from,
    wait_for_go,
)
from .wire import Body, Head, ResponseParser, WireError, payload, request

__all__ = ["main", "read_stream"]


def read_stream(server: Server, stream: str, into: bytearray) -> tuple[int, int]:
    """Read ``stream`` whole into ``into`` (sized to hold it); its length and the
    requests it took."""
    filled = 0
    offset = "-1"
    requests = 0
    sock: socket.socket | None = None
    try:
        while True:
            if sock is None:
                sock = server.connect()
            target = server.target(stream, f"offset={quote(offset, safe='')}")
            sock.sendall(request("GET", target, server.authority, server.headers))
            requests += 1
            head, filled, kept = _answer(sock, into, filled)
            if head.status != 200:
                raise WireError(f"catch-up read at {offset!r}: {head.status}")
            if not kept or head.headers.get("connection", "").lower() == "close":
                sock.close()
                sock = None
            next_offset = head.headers.get("stream-next-offset")
            if not next_offset:
                raise WireError(f"no Stream-Next-Offset at {offset!r}")
            offset = next_offset
            if head.headers.get("stream-up-to-date", "").lower() == "true":
                return filled, requests
    finally:
        if sock is not None:
            sock.close()


def _answer(sock: socket.socket, into: bytearray, filled: int) -> tuple[Head, int, bool]:
    """One response, its body copied into ``into`` from ``filled`` on: its head, where
    its body ends, and whether the connection stays open."""
    view = memoryview(into)
    parser = ResponseParser()
    head: Head | None = None
    while True:
        data = sock.recv(1 << 20)
        events = parser.feed(data) if data else parser.eof()
        if not data and not events:
            raise WireError("the server closed the connection before answering")
        for event in events:
            if isinstance(event, Body):
                end = filled + len(event.data)
                if end > len(into):
                    raise WireError(f"more than the {len(into)} bytes appended")
                view[filled:end] = event.data
                filled = end
            elif isinstance(event, Head):
                head = event
            else:
                assert head is not None
                return head, filled, bool(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.streams.reader")
    add_server_arguments(parser)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--appends", type=int, required=True)
    parser.add_argument("--size", type=int, required=True)
    args = parser.parse_args(argv)
    server = server_from(args)
    expected = b"".join(payload(0, seq, args.size) for seq in range(args.appends))
    into = bytearray(len(expected))
    say_ready()
    wait_for_go()
    cpu = time.process_time()
    started = time.monotonic()
    try:
        filled, requests = read_stream(server, args.stream, into)
    except (OSError, WireError) as exc:
        fail(f"reader: {exc!r}")
    seconds = time.monotonic() - started
    cpu = time.process_time() - cpu
    if filled != len(expected) or into != expected:
        first = next((i for i in range(filled) if into[i] != expected[i]), filled)
        fail(f"reader: {filled} of {len(expected)} bytes, the first wrong at {first}")
    report({"bytes": filled, "seconds": seconds, "requests": requests, "cpu_seconds": cpu})
    return 0


if __name__ == "__main__":
    sys.exit(main())
