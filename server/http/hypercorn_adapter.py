"""Every use of Hypercorn's internals, in one place, pinned to the version it was written for.

The server otherwise talks to Hypercorn through ASGI and its public ``Config`` and
``serve``. What ASGI cannot say is here, and only here:

- :func:`set_h11_error_answer`: the answer Hypercorn's HTTP/1.1 protocol sends itself
  to a request h11 cannot parse (``H11Protocol._send_error_response``, which sends
  h11 events with ``H11Protocol._send_h11_event``); Hypercorn has no hook for it.
- :func:`raw_connection`: the socket under an HTTP/1.1 response, its raw write and
  that write's lock, found from the ``send`` Hypercorn gave the app (the
  ``HTTPStream``'s, whose ``send`` is the ``H11Protocol``'s, whose ``send`` is the
  trio ``TCPServer``'s ``protocol_send``, with its ``stream`` and ``send_lock``; the
  raw write takes Hypercorn's ``RawData`` event, made here), for the live writes of
  :mod:`.fanout`, which so touch no Hypercorn name.

:data:`HYPERCORN_VERSION` is the version this module was written against; its test
(``tests/server/test_hypercorn_adapter.py``) checks that the installed Hypercorn is
that version and has what this module uses, so an upgrade fails there first.
Bad input: a Hypercorn without what it uses raises :class:`RuntimeError` when the
answer is installed, never later, mid-request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import chain
from typing import Final

import h11
import trio
from hypercorn.events import RawData
from hypercorn.protocol.h11 import H11Protocol

__all__ = [
    "HYPERCORN_VERSION",
    "ErrorAnswer",
    "RawConnection",
    "raw_connection",
    "set_h11_error_answer",
]

HYPERCORN_VERSION: Final = "0.18.0"
"""The Hypercorn release whose internals this module uses."""

ErrorAnswer = Callable[[int], tuple[list[tuple[bytes, bytes]], bytes]]
"""For a status code Hypercorn answers a malformed request with: the response's
headers (besides the server's own) and its body."""

_USED: Final = ("_send_error_response", "_send_h11_event")


def set_h11_error_answer(answer: ErrorAnswer) -> None:
    """Make Hypercorn's own HTTP/1.1 error answers ``answer``'s (process-wide; a second
    call replaces the first). Raises :class:`RuntimeError` if this Hypercorn has not
    the methods it replaces and uses."""
    for name in _USED:
        if not callable(getattr(H11Protocol, name, None)):
            raise RuntimeError(
                f"hypercorn.protocol.h11.H11Protocol has no {name}: this Hypercorn version "
                f"is not supported (written for {HYPERCORN_VERSION})"
            )

    async def send_error_response(self: H11Protocol, status_code: int) -> None:
        headers, body = answer(status_code)
        await self._send_h11_event(
            h11.Response(
                status_code=status_code,
                headers=list(chain(headers, self.config.response_headers("h11"))),
            )
        )
        if body:
            await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())

    H11Protocol._send_error_response = send_error_response  # type: ignore[method-assign]


@dataclass(frozen=True, slots=True)
class RawConnection:
    """The connection under an HTTP/1.1 response: its ``socket``, Hypercorn's raw
    write of bytes to it (``send_raw``: locked, shielded, no framing; any buffer, not
    copied) and that write's ``lock`` (held while Hypercorn writes)."""

    socket: trio.socket.SocketType
    send_raw: Callable[[bytes | memoryview], Awaitable[None]]
    lock: trio.Lock


def raw_connection(send: object) -> RawConnection | None:
    """The :class:`RawConnection` under the HTTP/1.1 response whose ASGI ``send`` (as
    Hypercorn gave it to the app) is ``send``; ``None`` for any other (HTTP/2, TLS,
    another server). Raises nothing."""
    http_stream = getattr(send, "__self__", None)
    protocol = getattr(getattr(http_stream, "send", None), "__self__", None)
    if not isinstance(protocol, H11Protocol):
        return None
    protocol_send = protocol.send
    tcp_server = getattr(protocol_send, "__self__", None)
    stream = getattr(tcp_server, "stream", None)
    lock = getattr(tcp_server, "send_lock", None)
    if not (isinstance(stream, trio.SocketStream) and isinstance(lock, trio.Lock)):
        return None

    async def send_raw(data: bytes | memoryview) -> None:
        # RawData says bytes; the trio stream's send_all takes any buffer (no copy)
        await protocol_send(RawData(data=data))  # type: ignore[arg-type]

    return RawConnection(stream.socket, send_raw, lock)
