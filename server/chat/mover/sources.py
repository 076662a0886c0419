"""Where the log mover reads a session's chunks: in-process, or from a runner's WebSocket.

A :class:`Source` follows one session from a cursor to its terminal line and hands
batches of consecutive chunks to ``deliver`` one at a time (the next is read meanwhile,
handed over after it returned). :class:`EmbeddedSource` reads the in-process session's
stored runs (or, asked for no chunks, only where they end: :class:`Passed`);
:class:`RemoteSource` reads
``GET /sessions/{id}/ws?batch=262144``, retrying from the last cursor with a backoff
while the runner does not answer, answers 5xx or the connection drops.

A runner no connection reaches for ``lost_after`` s (its host gone for good) raises
:class:`RunnerLostError`.

Bad input: :class:`SourceGoneError` (404, 410: unknown session, chunks no longer
retained), :class:`SourceRefusedError` (a refusal asking again will not change).
Cancellation: ``follow`` stops at once; chunks not yet delivered are dropped (the
caller resumes from what it stored).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol

import msgspec
import trio
import trio_websocket

from sandstream.server.chat.model import (
    RunnerLostError,
    SourceError,
    SourceGoneError,
    SourceRefusedError,
)
from sandstream.server.chat.store import Batch
from sandstream.server.sessions import (
    CursorGoneError,
    Session,
    SessionNotFoundError,
    SessionRuns,
    SessionService,
)

__all__ = [
    "Deliver",
    "EmbeddedSource",
    "OpenSessionRef",
    "Passed",
    "RemoteSource",
    "SessionSources",
    "Source",
]

log = logging.getLogger("sandstream.chat.mover")

Deliver = Callable[["Batch | Passed"], Awaitable[None]]
"""Takes one batch of chunks; the source waits for it before handing over the next."""

_BATCH_BYTES: Final = 256 * 1024
EMBEDDED_LINGER: Final = 0.1
"""Seconds the embedded mover waits after a batch before it moves the next one (the
session's end cuts it short; why: docs/chat.md, "Log mover"). The chunks are durable
in the session buffer meanwhile."""


@dataclass(frozen=True, slots=True)
class OpenSessionRef:
    """A session the mover should move: its id, and its runner's base URL (``None``:
    the embedded runner of this process)."""

    session_id: str
    runner_url: str | None = None


@dataclass(frozen=True, slots=True)
class Passed:
    """Chunks ``first`` … ``last`` of a session, followed without their bytes (the
    follower asked for none), and the last of them, ``last_line``."""

    first: int
    last: int
    last_line: bytes


class Source(Protocol):
    """One session's chunks from a cursor to its end; see the module docstring."""

    async def follow(
        self, session_id: str, after: int, deliver: Deliver, *, chunks: bool = True
    ) -> None:
        """Hand ``deliver`` the chunks after ``after`` to the session's end, as
        :class:`Batch` es; with ``chunks=False`` a source may hand :class:`Passed`
        instead (where they end, without their bytes)."""
        ...

    def published(self, session_id: str) -> int | None:
        """The cursor of the newest chunk of ``session_id`` this source knows of
        (``None``: none known), for the mover's lag. Never blocks."""
        ...


class EmbeddedSource:
    """The sessions of the in-process :class:`SessionService`."""

    def __init__(self, service: SessionService, *, linger: float = EMBEDDED_LINGER) -> None:
        self.service = service
        self.linger = linger

    def published(self, session_id: str) -> int | None:
        """The session's last stored cursor."""
        try:
            return self.service.get(session_id).last_cursor
        except SessionNotFoundError:
            return None

    async def follow(
        self, session_id: str, after: int, deliver: Deliver, *, chunks: bool = True
    ) -> None:
        """Every chunk after ``after`` to the session's end: all that the session stored
        since the last delivery in one batch (with ``chunks=False``: :class:`Passed`,
        only its last chunk read), at most one batch per ``linger`` s while the session
        runs, at once when it ends. Raises
        :class:`SourceGoneError` (also when retention dropped chunks not moved yet),
        :class:`SourceRefusedError` (``after`` is past the session's last chunk)."""
        try:
            session = self.service.get(session_id)
        except SessionNotFoundError:
            raise SourceGoneError(f"no session {session_id!r} in this process") from None
        if after > session.last_cursor:
            raise SourceRefusedError(
                f"session {session_id}: cursor {after} is past its last chunk {session.last_cursor}"
            )
        runs = session.stored_runs
        cursor = after
        try:
            while True:
                session.check_cursor(cursor)
                last = session.last_cursor
                if last > cursor:
                    await deliver(await (_stored if chunks else _passed)(runs, cursor, last))
                    cursor = last
                    await _linger(session, self.linger)
                elif session.ended:
                    return
                else:
                    await session.wait_beyond(cursor, math.inf)
        except CursorGoneError as exc:
            raise SourceGoneError(f"session {session_id}: {exc}") from None


async def _passed(runs: SessionRuns, after: int, last: int) -> Passed:
    """Where the stored chunks after cursor ``after`` up to ``last`` end. Raises
    :class:`SourceGoneError` if retention dropped the last of them."""
    held = await runs.read(last - 1, last)
    if not held or held[-1].last != last:
        raise SourceGoneError(f"the chunks after cursor {after} are no longer retained")
    return Passed(after + 1, last, held[-1].data)  # cut to its last chunk


async def _stored(runs: SessionRuns, after: int, last: int) -> Batch:
    """The stored chunks after cursor ``after`` up to ``last`` (the last of a run), as
    one batch. Raises :class:`SourceGoneError` if retention dropped some of them."""
    held = await runs.read(after, last)
    if not held or held[0].first != after + 1 or held[-1].last != last:
        raise SourceGoneError(f"the chunks after cursor {after} are no longer retained")
    data = held[0].data if len(held) == 1 else b"".join(run.data for run in held)
    return Batch(after + 1, data, last - after)


async def _linger(session: Session, seconds: float) -> None:
    """Wait ``seconds``, or less if the session ends meanwhile."""
    with trio.move_on_after(seconds):
        while not session.ended:
            await session.wait_beyond(session.last_cursor, math.inf)


class _Control(msgspec.Struct):
    cursor: int
    streamClosed: bool = False  # Durable Streams' names
    gone: bool = False


_control_decoder: Final = msgspec.json.Decoder(_Control)


class _Progress:
    """One follow's state across its connections: the last cursor received, and when."""

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor
        self.received = trio.current_time()
        self.waiting = False
        """True while the reader waits for the runner's next message."""


async def _receive(
    ws: trio_websocket.WebSocketConnection,
    session_id: str,
    progress: _Progress,
    send: trio.MemorySendChannel[Batch],
) -> None:
    """Hand the chunks of one connection (binary messages of whole chunks) to ``send``
    until the ``streamClosed`` control (a text message). Raises
    :class:`SourceGoneError` on ``gone``, :class:`SourceRefusedError` for a text
    message that is no control (a runner that sends a message per chunk) or a binary
    one that does not end a line, and what the
    connection raises (``ValueError`` for a control that does not decode)."""
    while True:
        progress.waiting = True
        try:
            message = await ws.get_message()
        finally:
            progress.waiting = False
        progress.received = trio.current_time()
        if isinstance(message, bytes):
            if not message.endswith(b"\n"):
                raise SourceRefusedError(
                    f"session {session_id}: the runner sent a batch that is not whole lines"
                )
            batch = Batch(progress.cursor + 1, message, message.count(b"\n"))
            await send.send(batch)  # then the cursor: a batch cut off here is read again
            progress.cursor = batch.last
            continue
        if not message.startswith('{"type":"control"'):
            raise SourceRefusedError(
                f"session {session_id}: the runner sent a chunk as text, not in a batch"
            )
        control = _control_decoder.decode(message)
        if control.gone:
            raise SourceGoneError(
                f"session {session_id}: the runner no longer keeps the chunks after "
                f"cursor {control.cursor}"
            )
        if control.streamClosed:
            return


class RemoteSource:
    """A runner's sessions, over its WebSocket; see the module docstring.

    ``read_ahead``: messages received and not yet delivered, at most (memory is bounded
    by it times 256 KiB, or the largest chunk, ``max_chunk_bytes``: larger WebSocket
    messages close the connection). A connection idle for ``ping_interval`` s is pinged, and
    dropped if no pong comes within ``ping_timeout`` s (a partition, a runner that
    hangs). A batch gathers what arrives for up to ``linger`` s after its first chunk.
    ``reconnects`` counts the connections that were retried.
    """

    def __init__(
        self,
        runner_url: str,
        token: str,
        *,
        reconnect_delay: float = 0.05,
        max_reconnect_delay: float = 2.0,
        read_ahead: int = 8,
        max_chunk_bytes: int = 16 * 1024 * 1024,
        connect_timeout: float = 10.0,
        ping_interval: float = 10.0,
        ping_timeout: float = 10.0,
        linger: float = 0.01,
        lost_after: float | None = None,
    ) -> None:
        base = runner_url.rstrip("/")
        if base.startswith("https://"):
            self._ws_base = "wss://" + base.removeprefix("https://")
        elif base.startswith("http://"):
            self._ws_base = "ws://" + base.removeprefix("http://")
        else:
            raise ValueError(f"a runner URL must be http:// or https://, got {runner_url!r}")
        self.runner_url = base
        self._headers = [(b"Authorization", f"Bearer {token}".encode())]
        self._delay = reconnect_delay
        self._max_delay = max_reconnect_delay
        self._read_ahead = read_ahead
        self._max_chunk = max_chunk_bytes
        self._connect_timeout = connect_timeout
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._linger = linger
        self._lost_after = lost_after
        self.reconnects = 0
        self._following: dict[str, _Progress] = {}

    def published(self, session_id: str) -> int | None:
        """The cursor of the last chunk received from the runner (a follow's read-ahead
        holds what is received and not yet delivered)."""
        progress = self._following.get(session_id)
        return None if progress is None else progress.cursor

    async def follow(
        self, session_id: str, after: int, deliver: Deliver, *, chunks: bool = True
    ) -> None:
        """Every chunk after ``after`` to the session's end, in batches of what has
        arrived meanwhile (see ``linger``; at most 256 KiB, unless one chunk is larger),
        always with their bytes (``chunks`` is ignored). Reconnects from the last cursor
        received when the connection drops. Raises
        :class:`SourceGoneError`, :class:`SourceRefusedError`."""
        send, receive = trio.open_memory_channel[Batch](self._read_ahead)
        failure: list[Exception] = []

        async def read() -> None:
            async with send:
                try:
                    await self._read(session_id, after, send)
                except SourceError as exc:
                    failure.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            try:
                await _batches(receive, deliver, self._linger)
            except Exception as exc:  # raised as itself below, not in an exception group
                failure.append(exc)
            nursery.cancel_scope.cancel()
        if failure:
            raise failure[0]

    async def _read(self, session_id: str, after: int, send: trio.MemorySendChannel[Batch]) -> None:
        progress = self._following[session_id] = _Progress(after)
        try:
            await self._read_from(session_id, progress, send)
        finally:
            if self._following.get(session_id) is progress:
                del self._following[session_id]

    async def _read_from(
        self, session_id: str, progress: _Progress, send: trio.MemorySendChannel[Batch]
    ) -> None:
        delay = self._delay
        away_since: float | None = None  # when the runner stopped answering (None: it does)
        while True:
            url = (
                f"{self._ws_base}/sessions/{session_id}/ws?cursor={progress.cursor}"
                f"&batch={min(_BATCH_BYTES, self._max_chunk)}"
            )
            try:
                async with trio_websocket.open_websocket_url(
                    url,
                    extra_headers=self._headers,
                    max_message_size=self._max_chunk,
                    connect_timeout=self._connect_timeout,
                    disconnect_timeout=1.0,
                    receive_buffer_size=None,  # trio's default (64 KiB), not 4 KiB
                    message_queue_size=4,
                ) as ws:
                    delay = self._delay
                    away_since = None  # the runner answered
                    if await self._watched(ws, session_id, progress, send):
                        return
                    why = f"no pong within {self._ping_timeout} s"
            except trio_websocket.ConnectionRejected as exc:
                self._refused(session_id, progress.cursor, exc)
                why = f"the runner answered {exc.status_code}"
            except (
                trio_websocket.ConnectionClosed,
                trio_websocket.HandshakeError,
                OSError,
                ValueError,  # msgspec.DecodeError, UnicodeDecodeError: not the runner's words
            ) as exc:
                why = repr(exc)
            if away_since is None:
                away_since = trio.current_time()
            self._check_lost(session_id, away_since)
            self.reconnects += 1
            log.info(
                "session %s: reading from %s failed (%s); again from cursor %d in %.2f s",
                session_id,
                self.runner_url,
                why,
                progress.cursor,
                delay,
            )
            await trio.sleep(delay)
            delay = min(delay * 2, self._max_delay)

    async def _watched(
        self,
        ws: trio_websocket.WebSocketConnection,
        session_id: str,
        progress: _Progress,
        send: trio.MemorySendChannel[Batch],
    ) -> bool:
        """Receive until the session ended (True), or until the runner stopped answering
        pings (False: a dead peer, a partition, which TCP alone notices only after
        minutes). Raises what receiving raises."""
        failure: list[Exception] = []
        ended = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ping, ws, progress, nursery.cancel_scope)
            try:
                await _receive(ws, session_id, progress, send)
                ended = True
            except Exception as exc:  # raised as itself below, not in an exception group
                failure.append(exc)
            nursery.cancel_scope.cancel()
        if failure:
            raise failure[0]
        return ended

    async def _ping(
        self, ws: trio_websocket.WebSocketConnection, progress: _Progress, reading: trio.CancelScope
    ) -> None:
        """Ping a connection idle for ``ping_interval`` s; cancel ``reading`` if no pong
        comes within ``ping_timeout`` s. (Not while the reader waits for its consumer:
        the pong would wait behind the unread messages.)"""
        while True:
            await trio.sleep(self._ping_interval)
            idle = trio.current_time() - progress.received
            if not progress.waiting or idle < self._ping_interval:
                continue
            with trio.move_on_after(self._ping_timeout) as waited:
                try:
                    await ws.ping()
                except trio_websocket.ConnectionClosed:
                    return  # the reader sees it too
            if waited.cancelled_caught:
                reading.cancel()
                return

    def _check_lost(self, session_id: str, away_since: float) -> None:
        """Raise :class:`RunnerLostError` once no connection to the runner was made (or
        kept) for ``lost_after`` s since ``away_since`` (trio time)."""
        if self._lost_after is None:
            return
        silent = trio.current_time() - away_since
        if silent >= self._lost_after:
            raise RunnerLostError(
                f"session {session_id}: the runner at {self.runner_url} has not answered "
                f"for {silent:.0f} s (more than {self._lost_after:g} s)"
            )

    def _refused(
        self, session_id: str, cursor: int, exc: trio_websocket.ConnectionRejected
    ) -> None:
        """Raise for a refusal that asking again will not change; return for a 5xx."""
        status = exc.status_code
        body = (exc.body or b"")[:300].decode(errors="replace")
        if status in (404, 410):
            raise SourceGoneError(f"session {session_id} at {self.runner_url}: {status} {body}")
        if status < 500 and status != 429:
            raise SourceRefusedError(
                f"session {session_id} at {self.runner_url}, cursor {cursor}: {status} {body}"
            )


async def _batches(
    receive: trio.MemoryReceiveChannel[Batch], deliver: Deliver, linger: float
) -> None:
    """Hand what ``receive`` holds to ``deliver`` as batches: whatever has arrived while
    the previous batch was delivered, and for up to ``linger`` s after a batch's first
    message, up to 256 KiB (fewer, larger transactions: a open session's messages are
    small). The end of the channel ends a batch at once."""
    async with receive:
        async for batch in receive:
            parts = [batch]
            size = len(batch.data)
            with trio.move_on_after(linger):
                while size < _BATCH_BYTES:
                    try:
                        more = await receive.receive()
                    except trio.EndOfChannel:
                        break
                    parts.append(more)
                    size += len(more.data)
            if len(parts) > 1:
                batch = Batch(
                    batch.first, b"".join(p.data for p in parts), sum(p.count for p in parts)
                )
            await deliver(batch)


class SessionSources:
    """The source of each session: the embedded one (``embedded``, this process's
    :class:`SessionService`) or a :class:`RemoteSource` per runner URL, sharing
    ``runner_token`` and ``runner_lost_after`` (its ``lost_after``). Raises
    :class:`SourceRefusedError` for a session whose kind it has no source for."""

    def __init__(
        self,
        *,
        embedded: SessionService | None = None,
        runner_token: str | None = None,
        runner_lost_after: float | None = None,
    ) -> None:
        self._embedded = None if embedded is None else EmbeddedSource(embedded)
        self._token = runner_token
        self._lost_after = runner_lost_after
        self._remote: dict[str, RemoteSource] = {}

    def __call__(self, ref: OpenSessionRef) -> Source:
        if ref.runner_url is None:
            if self._embedded is None:
                raise SourceRefusedError(f"session {ref.session_id}: no embedded runner here")
            return self._embedded
        if self._token is None:
            raise SourceRefusedError(
                f"session {ref.session_id}: no runner token for {ref.runner_url}"
            )
        source = self._remote.get(ref.runner_url)
        if source is None:
            source = self._remote[ref.runner_url] = RemoteSource(
                ref.runner_url, self._token, lost_after=self._lost_after
            )
        return source
