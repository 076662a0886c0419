"""A free TCP port on loopback, for a server that must be told its port up front.

The port is free when this returns; another process may still take it before the
server binds it, so callers that start a server on it retry with a new one where a
clash is possible.
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
