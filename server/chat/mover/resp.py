"""A small Redis client on trio: the RESP2 protocol, sans-IO, and a connection over TCP.

:class:`RespParser` takes the server's bytes (:meth:`~RespParser.receive_data`) and gives
replies (:meth:`~RespParser.next_reply`) until :data:`NEED_DATA`; :func:`encode_command`
writes a command. :class:`RedisClient` sends commands one at a time over one connection::

    async with RedisClient("redis://127.0.0.1:6379/0") as redis:
        await redis.execute("SET", "k", "v", "NX", "PX", 30000)   # "OK" or None

Replies: simple strings :class:`str`, bulk strings :class:`bytes`, integers, arrays and
nulls :class:`int`, :class:`list`, ``None``. Bad input: an error reply raises
:class:`RedisReplyError`, bad bytes from the server :class:`RespProtocolError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Final, TypeAlias
from urllib.parse import unquote, urlsplit

import trio

from ..errors import RedisConnectionError, RedisReplyError, RespProtocolError

__all__ = [
    "NEED_DATA",
    "Arg",
    "ErrorReply",
    "NeedData",
    "RedisClient",
    "Reply",
    "RespParser",
    "encode_command",
    "parse_redis_url",
]


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An error reply, as the parser hands it out (the client raises it)."""

    message: str


class NeedData:
    """The type of :data:`NEED_DATA`."""

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()
"""What :meth:`RespParser.next_reply` returns until a whole reply has arrived."""

Reply: TypeAlias = "str | bytes | int | ErrorReply | list[Reply] | None"
Arg: TypeAlias = "bytes | str | int"

_CRLF: Final = b"\r\n"


class _Incomplete(Exception):
    """Internal: the buffer ends inside a reply; ``need`` bytes are needed at least."""

    def __init__(self, need: int) -> None:
        self.need = need


class RespParser:
    """Turns the bytes of a RESP2 stream into replies; see the module docstring.

    Bounds (each exceeded raises :class:`RespProtocolError`): a bulk string longer
    than ``max_bulk_bytes``, an array longer than ``max_array_items``, arrays nested
    deeper than ``max_depth``, a line longer than ``max_line_bytes``.
    """

    def __init__(
        self,
        *,
        max_bulk_bytes: int = 512 * 1024 * 1024,
        max_array_items: int = 1 << 20,
        max_depth: int = 32,
        max_line_bytes: int = 64 * 1024,
    ) -> None:
        self._buffer = bytearray()
        self._need = 0
        self._max_bulk = max_bulk_bytes
        self._max_items = max_array_items
        self._max_depth = max_depth
        self._max_line = max_line_bytes

    def receive_data(self, data: bytes) -> None:
        """Add bytes received from the server."""
        self._buffer += data

    def next_reply(self) -> Reply | NeedData:
        """The next whole reply, or :data:`NEED_DATA`. Raises :class:`RespProtocolError`
        (the stream cannot be parsed further: close the connection)."""
        if len(self._buffer) < max(self._need, 1):
            return NEED_DATA
        try:
            reply, end = self._parse(0, 0)
        except _Incomplete as incomplete:
            self._need = incomplete.need
            return NEED_DATA
        del self._buffer[:end]
        self._need = 0
        return reply

    def _line(self, pos: int) -> tuple[bytes, int]:
        buffer = self._buffer
        end = buffer.find(_CRLF, pos, pos + self._max_line + 2)
        if end < 0:
            if len(buffer) - pos > self._max_line + 1:
                raise RespProtocolError(f"a line longer than {self._max_line} bytes")
            if buffer.find(b"\n", pos) >= 0:  # no CRLF before it: a bare LF
                raise RespProtocolError("a line ends with LF, not CRLF")
            raise _Incomplete(len(buffer) + 1)
        return bytes(buffer[pos:end]), end + 2

    def _number(self, text: bytes, what: str) -> int:
        digits = text[1:] if text[:1] == b"-" else text
        if not digits.isdigit() or not digits.isascii() or len(digits) > 19:
            raise RespProtocolError(f"{what} is not an integer: {text[:40]!r}")
        return int(text)

    def _parse(self, pos: int, depth: int) -> tuple[Reply, int]:
        line, pos = self._line(pos)
        if not line:
            raise RespProtocolError("an empty line where a reply starts")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return _text(rest), pos
        if kind == b"-":
            return ErrorReply(_text(rest)), pos
        if kind == b":":
            return self._number(rest, "an integer reply"), pos
        if kind == b"$":
            size = self._number(rest, "a bulk length")
            if size == -1:
                return None, pos
            if not 0 <= size <= self._max_bulk:
                raise RespProtocolError(f"a bulk length of {size} (at most {self._max_bulk})")
            end = pos + size
            if len(self._buffer) < end + 2:
                raise _Incomplete(end + 2)
            if self._buffer[end : end + 2] != _CRLF:
                raise RespProtocolError("a bulk string is not followed by CRLF")
            return bytes(self._buffer[pos:end]), end + 2
        if kind == b"*":
            count = self._number(rest, "an array length")
            if count == -1:
                return None, pos
            if not 0 <= count <= self._max_items:
                raise RespProtocolError(f"an array of {count} items (at most {self._max_items})")
            if depth >= self._max_depth:
                raise RespProtocolError(f"arrays nested deeper than {self._max_depth}")
            items: list[Reply] = []
            for _ in range(count):
                item, pos = self._parse(pos, depth + 1)
                items.append(item)
            return items, pos
        raise RespProtocolError(f"unknown reply type {kind!r}")


def _text(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise RespProtocolError(f"a status line is not UTF-8: {raw[:40]!r}") from None


def encode_command(*args: Arg) -> bytes:
    """``args`` as a RESP command (an array of bulk strings). Raises :class:`TypeError`
    for an argument that is not bytes, str or int (a bool is refused too)."""
    if not args:
        raise ValueError("a command needs at least its name")
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, int) and not isinstance(arg, bool):
            data = b"%d" % arg
        else:
            raise TypeError(f"a Redis argument must be bytes, str or int, not {type(arg).__name__}")
        parts += (b"$%d\r\n" % len(data), data, _CRLF)
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """Where a Redis server is and how to log in: from :func:`parse_redis_url`."""

    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = None


def parse_redis_url(url: str) -> RedisAddress:
    """``redis://[[user]:password@]host[:port][/db]`` → :class:`RedisAddress`.

    Raises :class:`ValueError` for another scheme (TLS, ``rediss://``, is not
    supported), a missing host, or a db that is not a number.
    """
    parts = urlsplit(url)
    if parts.scheme != "redis":
        raise ValueError(f"a Redis URL must start with redis:// (no TLS), got {url!r}")
    if not parts.hostname:
        raise ValueError(f"the Redis URL {url!r} names no host")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise ValueError(f"the Redis URL's database must be a number, got {path!r}")
    try:
        port = parts.port or 6379
    except ValueError as exc:
        raise ValueError(f"the Redis URL {url!r} has a bad port: {exc}") from None
    return RedisAddress(
        host=parts.hostname,
        port=port,
        db=int(path or 0),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


class RedisClient:
    """Commands to one Redis server, one at a time, over one TCP connection.

    The connection is opened by the first command (``AUTH`` and ``SELECT`` as the URL
    says) and dropped after any failure; the next command opens a new one. A command
    is never retried: a :class:`RedisConnectionError` means its outcome is unknown.
    Cancellation: a command cancelled in flight drops the connection (its reply would
    otherwise be taken for the next command's); the command may or may not have run.
    """

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        self.address = parse_redis_url(url)
        self._connect_timeout = connect_timeout
        self._stream: trio.SocketStream | None = None
        self._parser = RespParser()
        self._lock = trio.Lock()
        self._closed = False

    async def __aenter__(self) -> RedisClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; further commands raise :class:`RedisConnectionError`."""
        self._closed = True
        await self._drop()

    async def execute(self, *args: Arg) -> Reply:
        """Send one command and return its reply.

        Raises :class:`RedisReplyError` (an error reply; the connection stays),
        :class:`RedisConnectionError` (connecting failed or the connection broke) and
        :class:`RespProtocolError` (the server sent bad bytes; the connection is dropped).
        """
        request = encode_command(*args)
        async with self._lock:
            if self._closed:
                raise RedisConnectionError("the Redis client is closed")
            done = False
            try:
                stream = await self._connection()
                await stream.send_all(request)
                reply = await self._receive(stream)
                done = True
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise RedisConnectionError(f"Redis at {self._where()}: {exc!r}") from exc
            finally:
                if not done:
                    with trio.CancelScope(shield=True):
                        await self._drop()
        if isinstance(reply, ErrorReply):
            raise RedisReplyError(reply.message)
        return reply

    async def _receive(self, stream: trio.SocketStream) -> Reply:
        while (reply := self._parser.next_reply()) is NEED_DATA:
            data = await stream.receive_some(65536)
            if not data:
                raise RedisConnectionError(f"Redis at {self._where()} closed the connection")
            self._parser.receive_data(data)
        assert not isinstance(reply, NeedData)
        return reply

    async def _connection(self) -> trio.SocketStream:
        if self._stream is not None:
            return self._stream
        address = self.address
        with trio.move_on_after(self._connect_timeout) as timer:
            stream = await trio.open_tcp_stream(address.host, address.port)
        if timer.cancelled_caught:
            raise RedisConnectionError(f"Redis at {self._where()}: connect timed out")
        self._stream, self._parser = stream, RespParser()
        hello: list[tuple[Arg, ...]] = []
        if address.password is not None:
            user = (address.username,) if address.username else ()
            hello.append(("AUTH", *user, address.password))
        if address.db:
            hello.append(("SELECT", address.db))
        for command in hello:
            await stream.send_all(encode_command(*command))
            reply = await self._receive(stream)
            if isinstance(reply, ErrorReply):
                raise RedisConnectionError(f"Redis at {self._where()}: {reply.message}")
        return stream

    async def _drop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()

    def _where(self) -> str:
        return f"{self.address.host}:{self.address.port}"
