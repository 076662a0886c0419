"""Live writes: a stream's new runs written straight to the sockets of its caught-up readers.

The stream's writer offers each run to a reader's :class:`LiveConnection`: framed once
per transport (:class:`RunFraming`, one HTTP/1.1 chunk as h11 frames it; a run is any
object its frame function takes, :class:`LiveFraming` the sessions' runs of chunks),
written with one non-blocking ``send``, waking no reader's task. Only an HTTP/1.1 response under
Hypercorn's TCP server has one (:func:`live_connection`; else the ASGI path).
A run the socket does not take whole starts a **backlog**: its rest and the runs
offered after it are queued (the framed bytes, shared with the other connections of
the transport), and the reader's task, woken, writes them through Hypercorn
(:meth:`LiveConnection.write_backlog`) while the reader stays live; once it is
written, offers go straight to the socket again. A run that would take the backlog
over its bound is still queued, but refused: the reader leaves.
**One writer per socket**: outside :func:`live_connection` only the ASGI body writes;
inside, only ``offer`` while there is no backlog, then only the reader's task, which
finishes the backlog as it leaves, before the body writes again.

Cancellation: leaving by an exception writes nothing more (a write under way through
Hypercorn is shielded there, and ends first). Bad input: a run framed to nothing is
not written; ``offer`` never raises (a broken connection is refused, and its write
through Hypercorn ends the response).
"""

from __future__ import annotations

import os
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Final, Generic, Literal, Protocol, TypeAlias, TypeVar

import trio

from .client_watch import ClientWatch
from .hypercorn_adapter import raw_connection

__all__ = [
    "DEFAULT_BACKLOG_BYTES",
    "RAW_SEND_EXTENSION",
    "Frame",
    "LiveConnection",
    "LiveFraming",
    "Offered",
    "Run",
    "RunFraming",
    "http_chunk",
    "live_connection",
]

RAW_SEND_EXTENSION: Final = "sandstream.hypercorn_send"
"""The scope extension ``{"send": <the send callable Hypercorn gave the app>}``."""

DEFAULT_BACKLOG_BYTES: Final = 8 * 1024 * 1024
"""The bytes a live reader may have queued before it must leave the live set: at least
one group commit of a session's runs beyond the lag a session holds its writer back
for (docs/architecture.md)."""

_SEND_FLAGS: Final = socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL

R = TypeVar("R")

Frame: TypeAlias = Callable[[int, bytes, int], bytes]
"""A transport's body bytes for ``count`` chunks at cursors ``first``, ``first + 1``, …
given joined (each a ``\\n``-terminated line), for a reader that is up to date with
them: ``frame(first, data, count)``; ``b""``: nothing to write."""


Offered: TypeAlias = Literal["taken", "queued", "refused"]
"""What a live reader did with an offered run: ``"taken"``, written (or queued behind
a backlog its task was already woken for); ``"queued"``, it starts a backlog: wake the
reader's task to write it, the reader stays live; ``"refused"``, it holds the run but
must leave the live set (its backlog is full, or its connection broken) and is
offered nothing more: its task writes the backlog as it leaves."""


class Run(Protocol):
    """Consecutive chunks as a stream offers them (a session's stored run)."""

    @property
    def first(self) -> int:
        """The cursor of the first chunk."""
        ...

    @property
    def data(self) -> bytes:
        """The chunks joined, each a ``\\n``-terminated line."""
        ...

    @property
    def count(self) -> int:
        """How many chunks."""
        ...


def http_chunk(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk, byte for byte as h11 frames it. Raises
    :class:`ValueError` for empty ``data`` (that chunk would end the body)."""
    if not data:
        raise ValueError("an empty HTTP/1.1 chunk ends the body")
    return b"%x\r\n%b\r\n" % (len(data), data)


class RunFraming(Generic[R]):
    """One transport's framing for live writes: ``frame(run)`` (a transport's body
    bytes for a reader up to date with ``run``; ``b""``: nothing to write) applied once
    per run, as one HTTP/1.1 chunk, and those bytes shared by every connection of the
    transport.

    It keeps the newest run it framed (:attr:`run`) and its bytes (:attr:`payload`)
    until it frames the next one. ``frame`` must not raise: it runs in the stream's
    writer.
    """

    __slots__ = ("_frame", "payload", "run")

    def __init__(self, frame: Callable[[R], bytes]) -> None:
        self._frame = frame
        self.run: R | None = None
        self.payload = b""

    def frame_run(self, run: R) -> bytes:
        """Frame ``run``: it becomes :attr:`run`, and its frames as one HTTP/1.1 chunk
        (``b""``: nothing to write) :attr:`payload`, which is returned."""
        framed = self._frame(run)
        self.payload = http_chunk(framed) if framed else b""
        self.run = run
        return self.payload


class LiveFraming(RunFraming[Run]):
    """A :class:`RunFraming` of runs of chunks, framed by ``frame(first, data, count)``
    (:data:`Frame`)."""

    __slots__ = ()

    def __init__(self, frame: Frame) -> None:
        super().__init__(lambda run: frame(run.first, run.data, run.count))


class LiveConnection(Generic[R]):
    """The socket under one caught-up reader's HTTP/1.1 response (see the module
    docstring); made by :func:`live_connection`. ``limit``: the bound of its backlog
    in bytes; ``watch``, a stall watchdog, hears of each write of the backlog.

    Holds a duplicate of the socket's descriptor, so a closed connection can never
    turn into a write to another one.
    """

    __slots__ = (
        "_backlog",
        "_framing",
        "_limit",
        "_lock",
        "_queued",
        "_send_raw",
        "_socket",
        "_watch",
    )

    def __init__(
        self,
        fd: int,
        send_raw: Callable[[bytes | memoryview], Awaitable[None]],
        lock: trio.Lock,
        framing: RunFraming[R],
        limit: int,
        watch: ClientWatch | None,
    ) -> None:
        self._socket = socket.socket(fileno=os.dup(fd))
        self._socket.setblocking(False)
        self._send_raw = send_raw
        self._lock = lock
        self._framing = framing
        self._limit = limit
        self._watch = watch
        self._backlog: deque[bytes | memoryview] = deque()
        """What is still to be written, in order (the rest of a run, whole runs)."""
        self._queued = 0
        """The bytes of the backlog, and of a write of it under way."""

    def offer(self, run: R) -> Offered:
        """Write ``run`` (its transport's frames) with one non-blocking ``send``, or
        queue it behind the backlog (see :data:`Offered`). Never blocks or raises.

        The socket takes nothing while Hypercorn is writing to it, when its buffer is
        full, or when the connection is broken (refused: the write of the backlog
        through Hypercorn reports it).
        """
        framing = self._framing
        payload = framing.payload if run is framing.run else framing.frame_run(run)
        if not payload:
            return "taken"
        if self._queued:
            self._backlog.append(payload)
            self._queued += len(payload)
            return "taken" if self._queued <= self._limit else "refused"
        if self._lock.locked():
            sent = 0
        else:
            try:
                sent = self._socket.send(payload, _SEND_FLAGS)
            except BlockingIOError:
                sent = 0
            except OSError:  # broken: leave, and let Hypercorn's write report it
                sent = -1
        if sent == len(payload):
            return "taken"
        rest = memoryview(payload)[max(sent, 0) :]
        self._backlog.append(rest)
        self._queued = len(rest)
        return "queued" if sent >= 0 and self._queued <= self._limit else "refused"

    @property
    def queued(self) -> int:
        """Bytes offered and not yet written (its backlog)."""
        return self._queued

    async def write_backlog(self) -> None:
        """Write the backlog through Hypercorn (its lock, a shielded write; a broken
        connection ends the response), runs offered meanwhile included, until none is
        left: offers go straight to the socket again."""
        backlog = self._backlog
        watch = self._watch
        while backlog:
            data = backlog[0]  # taken off once written: a cancelled write begins none
            if watch is not None:
                watch.handed_out(trio.current_time())
            await self._send_raw(data)
            if watch is not None:
                watch.taken()
            backlog.popleft()
            self._queued -= len(data)


@asynccontextmanager
async def live_connection(
    scope: Mapping[str, object],
    framing: RunFraming[R],
    watch: ClientWatch | None = None,
    *,
    backlog_bytes: int = DEFAULT_BACKLOG_BYTES,
) -> AsyncIterator[LiveConnection[R] | None]:
    """The :class:`LiveConnection` under the HTTP/1.1 response of ``scope``, written
    with ``framing``'s bytes while the caller is inside, its backlog bounded by
    ``backlog_bytes``; ``None`` where there is none (see the module docstring).

    Enter only between two of the response body's ASGI sends, and send nothing
    through ASGI until it is left. Leaving it normally writes the backlog
    (:meth:`~LiveConnection.write_backlog`; ``watch``, a stall watchdog, hears of
    those writes); leaving it by an exception writes nothing. Either way its
    descriptor is closed.
    """
    connection = _connect(scope, framing, backlog_bytes, watch)
    if connection is None:
        yield None
        return
    try:
        yield connection
        await connection.write_backlog()
    finally:
        connection._socket.close()


def _connect(
    scope: Mapping[str, object],
    framing: RunFraming[R],
    limit: int,
    watch: ClientWatch | None,
) -> LiveConnection[R] | None:
    """The connection under ``scope``'s response, or ``None``. Raises nothing.

    Found from the app's ``send`` (kept in the scope by :class:`~.asgi.HTTPConnection`)
    by :func:`~.hypercorn_adapter.raw_connection`."""
    extensions = scope.get("extensions")
    if (
        scope.get("http_version") != "1.1"
        or scope.get("method") == "HEAD"  # its response has no body: Hypercorn drops it
        or not isinstance(extensions, dict)
    ):
        return None
    raw = raw_connection(extensions.get(RAW_SEND_EXTENSION, {}).get("send"))
    if raw is None:
        return None
    try:
        return LiveConnection(raw.socket.fileno(), raw.send_raw, raw.lock, framing, limit, watch)
    except OSError:  # closed meanwhile, or out of descriptors
        return None
