"""Writing a streaming response's body straight to its socket, beside Hypercorn.

A live stream that many clients follow (a session's readers) pays, per client and per
write, the whole ASGI path: Quart's body loop, Hypercorn's stream and HTTP/1.1
protocol, h11's chunked framing, a lock, a shielded ``send_all`` and several trio
checkpoints, ~50 µs of Python. :class:`RawConnection` lets one task write the same
pre-framed bytes to many clients in a tight loop instead: :meth:`RawConnection.try_send`
is one non-blocking ``send(2)``.

It is the connection under the current HTTP/1.1 response, found through Hypercorn's
objects (:func:`raw_connection`): the ``send`` callable Hypercorn hands the app (kept
in the scope by :class:`~.asgi.HTTPConnection`) belongs to its ``HTTPStream``, whose
``send`` belongs to its ``H11Protocol``, whose ``send`` is the ``TCPServer``'s raw,
locked, shielded socket write. Anything else (HTTP/2, TLS, another server, a Hypercorn
that moved these) gives ``None``, and callers keep to the ASGI path; so does a ``HEAD``
request, whose response has no body at all.

The rules that keep the wire exactly as h11 would write it:

- only while the response body is streaming and nobody else writes to the connection
  (the app is between two of its ASGI sends; :meth:`try_send` also refuses while
  Hypercorn's send lock is held);
- the bytes are whole HTTP/1.1 chunks (:func:`http_chunk`): an HTTP/1.1 response
  without ``Content-Length`` is chunked, and h11's chunked writer keeps no count;
- a write :meth:`try_send` could not finish is finished with :meth:`send`
  (Hypercorn's own write, which also handles a broken connection: the app gets
  ``http.disconnect``) before anything else is written.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import trio
from hypercorn.events import RawData
from hypercorn.protocol.h11 import H11Protocol

__all__ = ["RAW_SEND_EXTENSION", "RawConnection", "http_chunk", "raw_connection"]

RAW_SEND_EXTENSION: Final = "sandstream.hypercorn_send"
"""The scope extension ``{"send": <the send callable Hypercorn gave the app>}``."""

_SEND_FLAGS: Final = socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL


def http_chunk(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk, byte for byte as h11 frames it. Raises
    :class:`ValueError` for empty ``data`` (that chunk would end the body)."""
    if not data:
        raise ValueError("an empty HTTP/1.1 chunk ends the body")
    return b"%x\r\n%b\r\n" % (len(data), data)


class RawConnection:
    """The socket under one HTTP/1.1 response (see the module docstring).

    Holds a duplicate of the socket's descriptor, so a closed connection can never
    turn into a write to another one: :meth:`close` it when done (idempotent).
    """

    __slots__ = ("_lock", "_send_raw", "socket")

    def __init__(
        self, fd: int, send_raw: Callable[[RawData], Awaitable[None]], lock: trio.Lock
    ) -> None:
        self.socket = socket.socket(fileno=os.dup(fd))
        self.socket.setblocking(False)
        self._send_raw = send_raw
        self._lock = lock

    def try_send(self, data: bytes | memoryview) -> int:
        """Write what the socket takes now, without waiting; return how many bytes.

        0 when the socket's buffer is full, Hypercorn is writing, or the connection
        is broken (:meth:`send` of the rest then reports it the usual way).
        """
        if self._lock.locked():
            return 0
        try:
            return self.socket.send(data, _SEND_FLAGS)
        except OSError:  # BlockingIOError, or broken: send() of the rest tells which
            return 0

    async def send(self, data: bytes | memoryview) -> None:
        """Write ``data`` through Hypercorn (its lock, a shielded write; a broken
        connection ends the response with ``http.disconnect``, as for any write)."""
        # RawData says bytes; the trio stream's send_all takes any buffer (no copy)
        await self._send_raw(RawData(data=data))  # type: ignore[arg-type]

    def close(self) -> None:
        self.socket.close()


def raw_connection(scope: Mapping[str, object]) -> RawConnection | None:
    """The :class:`RawConnection` under the HTTP/1.1 response of ``scope``, or ``None``
    where there is none (see the module docstring). Raises nothing."""
    extensions = scope.get("extensions")
    if (
        scope.get("http_version") != "1.1"
        or scope.get("method") == "HEAD"  # its response has no body: Hypercorn drops it
        or not isinstance(extensions, dict)
    ):
        return None
    send = extensions.get(RAW_SEND_EXTENSION, {}).get("send")
    http_stream = getattr(send, "__self__", None)
    protocol = getattr(getattr(http_stream, "send", None), "__self__", None)
    if not isinstance(protocol, H11Protocol):
        return None
    send_raw = protocol.send
    tcp_server = getattr(send_raw, "__self__", None)
    stream = getattr(tcp_server, "stream", None)
    lock = getattr(tcp_server, "send_lock", None)
    if not (isinstance(stream, trio.SocketStream) and isinstance(lock, trio.Lock)):
        return None
    try:
        return RawConnection(stream.socket.fileno(), send_raw, lock)
    except OSError:  # closed meanwhile, or out of descriptors
        return None
