"""The gateway's HTTP/1.1 server side, on h11: one connection, its requests in turn.

:func:`serve_connection` reads each request's head, hands an :class:`Exchange` to the
handler (which streams the request's body and the answer through it), then goes on to
the next request of a keep-alive connection. Nothing is buffered: each body chunk goes
on as it comes. A request h11 cannot parse gets 400 and the connection closes; an
answer the handler leaves unfinished (:meth:`Exchange.abort`, an exception) closes the
connection without the body's end, so the client sees the cut. Cancellation closes the
connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final

import h11
import trio

__all__ = ["Exchange", "serve_connection"]

log = logging.getLogger("sandstream.gateway")

READ_SIZE: Final = 64 * 1024
MAX_HEAD_BYTES: Final = 64 * 1024
_CLOSED: Final = (trio.BrokenResourceError, trio.ClosedResourceError)

Headers = list[tuple[bytes, bytes]]


class ClientGone(Exception):
    """The client closed the connection or broke the protocol mid-request."""


class Exchange:
    """One request and its answer on a connection."""

    def __init__(self, conn: h11.Connection, stream: trio.abc.Stream, request: h11.Request):
        self._conn = conn
        self._stream = stream
        self.method: bytes = request.method
        self.target: bytes = request.target
        self.headers: Headers = [(bytes(n), bytes(v)) for n, v in request.headers.raw_items()]
        self.complete = False
        """True once the whole answer was sent."""
        self._held = b""

    @property
    def has_body(self) -> bool:
        """Whether the request has a body (``Content-Length`` > 0 or chunked)."""
        for name, value in self.headers:
            lower = name.lower()
            if lower == b"transfer-encoding" or (
                lower == b"content-length" and value.strip() != b"0"
            ):
                return True
        return False

    async def body(self) -> AsyncGenerator[bytes, None]:
        """The request's body, chunk by chunk as it arrives. Raises :class:`ClientGone`."""
        conn = self._conn
        if conn.they_are_waiting_for_100_continue:
            await self._send(h11.InformationalResponse(status_code=100, headers=[]))
        while True:
            event = await next_event(conn, self._stream)
            if type(event) is h11.Data:
                yield bytes(event.data)
            elif type(event) is h11.EndOfMessage:
                return
            else:
                raise ClientGone("the client's body ended early")

    async def start(
        self, status: int, reason: bytes, headers: Headers, *, hold: bool = False
    ) -> None:
        """Send the answer's head. With ``Content-Length`` that is its framing; without,
        chunked (an HTTP/1.0 client: until the connection closes). ``hold``: the head
        goes with the next :meth:`send` or :meth:`end`, in one write (for a body at hand)."""
        response = h11.Response(status_code=status, reason=reason, headers=headers)
        if hold:
            self._held = self._conn.send(response) or b""
        else:
            await self._send(response)

    async def send(self, data: bytes) -> None:
        """Send a piece of the answer's body."""
        if data:
            await self._send(h11.Data(data=data))

    async def end(self) -> None:
        """End the answer."""
        await self._send(h11.EndOfMessage())
        self.complete = True

    async def answer(self, status: int, body: bytes, content_type: bytes) -> None:
        """A whole small answer of the gateway's own."""
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        await self.start(status, b"", headers)
        if self.method.upper() != b"HEAD":
            await self.send(body)
        await self.end()

    async def _send(self, event: h11.Event) -> None:
        data = self._conn.send(event)
        if self._held:
            data = self._held + (data or b"")
            self._held = b""
        if data:
            try:
                await self._stream.send_all(data)
            except _CLOSED as exc:
                raise ClientGone("the client went away") from exc


async def next_event(conn: h11.Connection, stream: trio.abc.Stream) -> h11.Event:
    """The connection's next h11 event, reading as needed. Raises :class:`ClientGone`
    when the peer's bytes break HTTP or the connection fails."""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise ClientGone(f"bad request: {exc}") from exc
        if event is not h11.NEED_DATA:
            return event  # type: ignore[return-value]
        try:
            data = await stream.receive_some(READ_SIZE)
        except (*_CLOSED, OSError) as exc:
            raise ClientGone("the client's connection failed") from exc
        conn.receive_data(bytes(data))


async def serve_connection(
    stream: trio.abc.Stream, handle: Callable[[Exchange], Awaitable[None]]
) -> None:
    """Serve the requests of one connection with ``handle``, then close it."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    async with stream:
        while True:
            try:
                event = await next_event(conn, stream)
            except ClientGone as exc:
                await _refuse(conn, stream, exc)
                return
            if type(event) is not h11.Request:
                return  # ConnectionClosed, or a peer that sent nothing more
            exchange = Exchange(conn, stream, event)
            try:
                await handle(exchange)
            except ClientGone:
                return
            except (h11.LocalProtocolError, OSError):
                log.exception("the model gateway could not answer; the connection is closed")
                return
            if not exchange.complete or conn.our_state is h11.MUST_CLOSE:
                return
            try:
                await _finish_request(conn, stream)
            except ClientGone:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return


async def _finish_request(conn: h11.Connection, stream: trio.abc.Stream) -> None:
    """Read what is left of the request (the end of an empty body, a body the
    provider answered before reading), so that the next request can be read."""
    while conn.their_state is h11.SEND_BODY:
        event = await next_event(conn, stream)
        if type(event) is not h11.Data and type(event) is not h11.EndOfMessage:
            raise ClientGone("the client's body ended early")


async def _refuse(conn: h11.Connection, stream: trio.abc.Stream, exc: ClientGone) -> None:
    """400 to a request h11 refused, if an answer can still start."""
    if conn.our_state is not h11.IDLE or conn.their_state is h11.CLOSED:
        return
    body = f"{exc}\n".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    try:
        data = conn.send(h11.Response(status_code=400, headers=headers))
        data = (data or b"") + (conn.send(h11.Data(data=body)) or b"")
        data += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)
    except (h11.LocalProtocolError, *_CLOSED, OSError):
        pass
