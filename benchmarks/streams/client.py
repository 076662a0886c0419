"""What the stream benchmark's client processes share: their arguments, their sockets,
and how they talk to the process that runs them.

A client process is started with the server's URL, the stream path prefix and the
headers every request carries (:func:`add_server_arguments`); it prints ``ready`` on
stdout once it is set up, waits for a line on stdin (:func:`wait_for_go`) before it
starts measuring, and ends by printing one JSON object (:func:`report`). A failure
(a wrong status, a byte out of place) ends it with a message on stderr and a non-zero
exit, which the parent turns into an error naming the server. A client process
has no cancellation of its own: its parent kills it if it leaves early.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

__all__ = [
    "Server",
    "add_server_arguments",
    "fail",
    "report",
    "say_ready",
    "server_from",
    "wait_for_go",
]


@dataclass(frozen=True)
class Server:
    """Where the streams are: ``host:port``, the path before a stream's name, and the
    headers of every request (its bearer token, if any)."""

    host: str
    port: int
    prefix: str
    headers: dict[str, str]

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"

    def target(self, stream: str, query: str = "") -> str:
        """The request target of ``stream``, with ``query`` (already encoded)."""
        path = self.prefix + quote(stream)
        return f"{path}?{query}" if query else path

    def connect(self) -> socket.socket:
        """A blocking TCP connection with Nagle's delay off."""
        sock = socket.create_connection((self.host, self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the server's base URL, http://host:port")
    parser.add_argument("--prefix", default="/v1/stream/", help="path before a stream's name")
    parser.add_argument(
        "--header", action="append", default=[], help="'Name: value' sent with each request"
    )


def server_from(args: argparse.Namespace) -> Server:
    parts = urlsplit(args.url)
    headers = {}
    for line in args.header:
        name, _, value = line.partition(":")
        headers[name.strip()] = value.strip()
    return Server(parts.hostname or "127.0.0.1", parts.port or 80, args.prefix, headers)


def say_ready() -> None:
    print("ready", flush=True)


def wait_for_go() -> None:
    """Block until the parent writes a line (or closes stdin)."""
    sys.stdin.readline()


def report(result: dict[str, Any]) -> None:
    print(json.dumps(result), flush=True)


def fail(message: str) -> None:
    raise SystemExit(message)
