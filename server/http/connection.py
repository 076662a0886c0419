"""Cut a client's TCP connection from inside the app, for a write that can never finish.

Hypercorn shields its socket writes and has no write timeout, so a client that stops
reading keeps the response task blocked in ``send`` forever: neither cancellation nor
Hypercorn's graceful-shutdown deadline reaches it. The only way out is to make the
write fail. The ASGI scope names the connection (``client`` and ``server``
addresses); :func:`abort_connection` finds the socket with those two ends among the
process's file descriptors and shuts it down with ``SO_LINGER`` 0, so the pending
write fails at once, the unsent data is dropped, and closing it sends a reset.
Blocking but brief (one pass over the open descriptors); rare by design.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from collections.abc import Sequence
from typing import Any

__all__ = ["abort_connection", "abort_scope_connection"]

_FD_DIRS = ("/proc/self/fd", "/dev/fd")


def abort_scope_connection(scope: dict[str, Any]) -> bool:
    """:func:`abort_connection` for an ASGI HTTP scope. False if it has no addresses."""
    client = scope.get("client")
    server = scope.get("server")
    if not client or not server:
        return False
    return abort_connection((str(client[0]), int(client[1])), (str(server[0]), int(server[1])))


def abort_connection(client: tuple[str, int], server: tuple[str, int]) -> bool:
    """Shut down the TCP socket from ``server`` (our end) to ``client``; True if found.

    The socket itself stays open (its owner closes it, which then sends a reset);
    only reads and writes on it fail from now on.
    """
    for fd in _socket_fds():
        try:
            dup = os.dup(fd)
        except OSError:
            continue
        try:
            sock = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            continue
        with sock:
            try:
                if sock.type != socket.SOCK_STREAM:
                    continue
                if not _same(sock.getsockname(), server) or not _same(sock.getpeername(), client):
                    continue
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                continue
            return True
    return False


def _same(address: Any, expected: tuple[str, int]) -> bool:
    return (
        isinstance(address, Sequence)
        and len(address) >= 2
        and address[0] == expected[0]
        and address[1] == expected[1]
    )


def _socket_fds() -> list[int]:
    for directory in _FD_DIRS:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        fds: list[int] = []
        for name in names:
            if not name.isdigit():
                continue
            fd = int(name)
            try:
                if stat.S_ISSOCK(os.fstat(fd).st_mode):
                    fds.append(fd)
            except OSError:
                continue
        return fds
    return []
