"""The gateway's calls to a provider: a lean HTTP/1.1 client of its own over trio
sockets (TLS with :class:`trio.SSLStream` for ``https``), connections kept alive per
turn in an :class:`UpstreamPool`.

h11 writes the request and reads the answer's head; the body is read as the provider
framed it (:mod:`.framing`) in big reads and handed on as it comes, never buffered.
A connection goes back to the pool only when its answer was read to its end and the
provider keeps it open; one the provider closed while idle is never reused.
Failures raise :class:`~.errors.UpstreamConnectError` (before a connection),
:class:`~.errors.UpstreamTimeout` (connecting past :data:`CONNECT_TIMEOUT`, silent
past :data:`READ_TIMEOUT`, a write stuck past :data:`WRITE_TIMEOUT`) or
:class:`~.errors.UpstreamCut` (the connection failed, or the answer broke HTTP/1.1).
Cancellation closes the call's connection (it is never pooled).
"""

from __future__ import annotations

import re
import select
import ssl
import urllib.parse
from collections.abc import AsyncGenerator, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Final

import h11
import trio

from .errors import UpstreamConnectError, UpstreamCut, UpstreamFramingError, UpstreamTimeout
from .framing import BodyReader, ChunkedBody, LengthBody, UntilClose

__all__ = [
    "CONNECT_TIMEOUT",
    "READ_TIMEOUT",
    "WRITE_TIMEOUT",
    "UpstreamAnswer",
    "UpstreamPool",
]

CONNECT_TIMEOUT: Final = 15.0
"""Seconds to connect to a provider (TLS handshake included)."""
READ_TIMEOUT: Final = 600.0
"""Seconds a provider may be silent mid-answer (a model may think long)."""
WRITE_TIMEOUT: Final = 60.0
"""Seconds one write of the request may wait for the provider to read."""
READ_SIZE: Final = 1 << 20
"""The most read at once: a long answer passes in big pieces."""
MAX_HEAD_BYTES: Final = 64 * 1024
MAX_IDLE: Final = 8
"""Idle connections kept per provider origin."""
_HEAD_END: Final = re.compile(rb"\n\r?\n")
_FAILED: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int


class _Connection:
    """One connection to an origin, and the bytes read past the last answer's end."""

    __slots__ = ("origin", "socket", "stream")

    def __init__(self, origin: _Origin, stream: trio.abc.Stream, socket: trio.socket.SocketType):
        self.origin = origin
        self.stream = stream
        self.socket = socket

    def closed_by_peer(self) -> bool:
        """Whether the idle connection has something to read: the provider closed it
        (or sent what no request asked for); either way it is not reused."""
        poll = select.poll()
        poll.register(self.socket.fileno(), select.POLLIN)
        return bool(poll.poll(0))

    async def send(self, data: bytes) -> None:
        try:
            with trio.fail_after(WRITE_TIMEOUT):
                await self.stream.send_all(data)
        except trio.TooSlowError as exc:
            raise UpstreamTimeout("timed out") from exc
        except _FAILED as exc:
            raise UpstreamCut(f"the connection failed ({exc or type(exc).__name__})") from exc

    async def receive(self) -> bytes:
        try:
            with trio.fail_after(READ_TIMEOUT):
                return bytes(await self.stream.receive_some(READ_SIZE))
        except trio.TooSlowError as exc:
            raise UpstreamTimeout("timed out") from exc
        except _FAILED as exc:
            raise UpstreamCut(f"the connection failed ({exc or type(exc).__name__})") from exc

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await trio.aclose_forcefully(self.stream)


class UpstreamAnswer:
    """A provider's answer: its status, reason and headers; :meth:`body` streams the
    payload; :meth:`aclose` (always) puts the connection back or closes it."""

    def __init__(
        self,
        pool: UpstreamPool,
        connection: _Connection,
        response: h11.Response,
        reader: BodyReader,
        start: bytes,
        reusable: bool,
    ) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
        self.status: int = response.status_code
        self.reason: bytes = bytes(response.reason)
        self.headers: Headers = [(bytes(n), bytes(v)) for n, v in response.headers.raw_items()]
        self._reader = reader
        self._start = start
        self._reusable = reusable

    @property
    def body_at_hand(self) -> bool:
        """Whether the body's first piece (or its end) came with the head: no wait."""
        return bool(self._start) or self._reader.done

    async def body(self) -> AsyncGenerator[bytes, None]:
        """The body's payload as it comes. Raises :class:`~.errors.UpstreamCut` (or
        :class:`~.errors.UpstreamTimeout`) when the answer stops before its end."""
        connection = self._connection
        assert connection is not None
        reader = self._reader
        data = self._start
        self._start = b""
        while True:
            for piece in reader.feed(data):
                yield piece
            if reader.done:
                break
            data = await connection.receive()
            if not data:
                if isinstance(reader, UntilClose):
                    reader.done = True
                    self._reusable = False
                    break
                raise UpstreamCut("the answer was cut (the provider closed the connection)")

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        reusable = self._reusable and self._reader.done
        if not (
            reusable and not (self._start or self._reader.leftover) and self._pool.put(connection)
        ):
            await connection.aclose()


class UpstreamPool:
    """A turn's connections to its providers; :meth:`aclose` closes those idle."""

    def __init__(self) -> None:
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._tls: ssl.SSLContext | None = None

    async def call(
        self,
        method: bytes,
        url: str,
        headers: Headers,
        body: AsyncGenerator[bytes, None] | None,
    ) -> UpstreamAnswer:
        """Send the request (``body`` streamed as it comes), read the answer's head.
        Raises an :class:`~.errors.UpstreamError`; whatever the client's ``body``
        raises goes through (the connection closed)."""
        origin, target, host = _parse(url)
        connection = await self._connection(origin)
        try:
            answer = await self._exchange(connection, method, target, host, headers, body)
        except BaseException:
            await connection.aclose()
            raise
        return answer

    def put(self, connection: _Connection) -> bool:
        """Keep ``connection`` for the next call to its origin; ``False``: enough are
        kept already (the caller closes it)."""
        idle = self._idle.setdefault(connection.origin, [])
        if len(idle) >= MAX_IDLE:
            return False
        idle.append(connection)
        return True

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                await connection.aclose()

    async def _connection(self, origin: _Origin) -> _Connection:
        idle = self._idle.get(origin, [])
        while idle:
            connection = idle.pop()
            if not connection.closed_by_peer():
                return connection
            await connection.aclose()
        return await self._open(origin)

    async def _open(self, origin: _Origin) -> _Connection:
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                tcp = await trio.open_tcp_stream(origin.host, origin.port)
                tcp.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, True)
                if origin.scheme == "http":
                    return _Connection(origin, tcp, tcp.socket)
                tls = trio.SSLStream(
                    tcp, self._tls_context(), server_hostname=origin.host, https_compatible=True
                )
                try:
                    await tls.do_handshake()
                except BaseException:
                    await trio.aclose_forcefully(tcp)
                    raise
                return _Connection(origin, tls, tcp.socket)
        except trio.TooSlowError as exc:
            raise UpstreamTimeout("timed out") from exc
        except _FAILED as exc:
            raise UpstreamConnectError(f"could not connect ({exc})") from exc

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
            self._tls.set_alpn_protocols(["http/1.1"])
        return self._tls

    async def _exchange(
        self,
        connection: _Connection,
        method: bytes,
        target: bytes,
        host: bytes,
        headers: Headers,
        body: AsyncGenerator[bytes, None] | None,
    ) -> UpstreamAnswer:
        conn = h11.Connection(h11.CLIENT)
        names = {name.lower() for name, _ in headers}
        head = [(b"host", host), *headers]
        if body is not None and b"content-length" not in names:
            head.append((b"transfer-encoding", b"chunked"))
        try:
            data = conn.send(h11.Request(method=method, target=target, headers=head))
        except h11.LocalProtocolError as exc:
            raise UpstreamConnectError(f"the request cannot go upstream ({exc})") from exc
        sent_whole = True
        try:
            # the head goes with the body's first piece: one write, one wake of the provider
            pending = data or b""
            if body is not None:
                async with aclosing(body) as pieces:
                    async for piece in pieces:
                        await connection.send(pending + (conn.send(h11.Data(data=piece)) or b""))
                        pending = b""
            pending += conn.send(h11.EndOfMessage()) or b""
            if pending:
                await connection.send(pending)
        except UpstreamCut:
            sent_whole = False  # the provider may have answered before reading it all
        except h11.LocalProtocolError as exc:  # a body longer or shorter than it said
            raise UpstreamCut(f"the request's body did not match its length ({exc})") from exc
        response, rest = await _read_head(conn, connection, method)
        reader = _body_reader(method, response)
        reusable = (
            sent_whole
            and response.http_version == b"1.1"
            and not isinstance(reader, UntilClose)
            and b"close" not in _tokens(response.headers.raw_items(), b"connection")
        )
        return UpstreamAnswer(self, connection, response, reader, rest, reusable)


async def _read_head(
    conn: h11.Connection, connection: _Connection, method: bytes
) -> tuple[h11.Response, bytes]:
    """The answer's head (past any 1xx) and the bytes read after it."""
    buffer = b""
    while True:
        end = _HEAD_END.search(buffer)
        if end is None:
            if len(buffer) > MAX_HEAD_BYTES:
                raise UpstreamFramingError("the answer's head is too long")
            data = await connection.receive()
            if not data:
                raise UpstreamCut("the answer was cut (the provider closed the connection)")
            buffer += data
            continue
        conn.receive_data(buffer[: end.end()])
        buffer = buffer[end.end() :]
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise UpstreamFramingError(f"the answer was cut (not HTTP/1.1: {exc})") from exc
        if type(event) is h11.Response:
            return event, buffer
        if type(event) is not h11.InformationalResponse:
            raise UpstreamFramingError("the answer was cut (not HTTP/1.1)")


def _body_reader(method: bytes, response: h11.Response) -> BodyReader:
    """How the answer's body is framed (RFC 9112 6.3); h11 has checked the head."""
    if method.upper() == b"HEAD" or response.status_code in (204, 304):
        return LengthBody(0)
    raw = list(response.headers.raw_items())
    if _tokens(raw, b"transfer-encoding"):
        return ChunkedBody()  # h11 refuses any other transfer coding
    lengths = [value for name, value in raw if name.lower() == b"content-length"]
    return LengthBody(int(lengths[0])) if lengths else UntilClose()


def _tokens(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    found: list[bytes] = []
    for header, value in headers:
        if header.lower() == name:
            found.extend(t.strip().lower() for t in value.split(b","))
    return found


def _parse(url: str) -> tuple[_Origin, bytes, bytes]:
    """The origin, request-target and ``Host`` of ``url``; a bad one raises
    :class:`~.errors.UpstreamConnectError`."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
        host = parts.hostname
        if parts.scheme not in ("http", "https") or not host:
            raise ValueError("not an http(s) URL with a host")
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        netloc = parts.netloc.rpartition("@")[2]
        origin = _Origin(parts.scheme, host, port or (443 if parts.scheme == "https" else 80))
        return origin, target.encode("latin-1"), netloc.encode("ascii")
    except (ValueError, UnicodeError) as exc:
        raise UpstreamConnectError(f"could not connect (a bad provider URL: {exc})") from exc
