"""Shared pieces of the log mover tests: Redis, the chat database, a cuttable proxy, a
recording sink and a fold that keeps what it was fed. A mover in a process of its own
(to be SIGKILLed) is :mod:`benchmarks.support.mover_process`, which the mover benchmark
runs too.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Literal, TypeVar

import pytest
import trio

from benchmarks.support.redis_server import open_redis_server
from sandstream.server.chat.store.database import Connection, Database
from sandstream.server.chat.store.moved_runs import Batch, MovedChunks
from sandstream.server.sessions import split_chunks
from tests.chat.databases import open_database

__all__ = [
    "CollectingFold",
    "LeaseKind",
    "Proxy",
    "RecordingSink",
    "open_chat_db",
    "redis_url",
    "start_proxy",
]

LeaseKind = Literal["sqlite", "redis"]
T = TypeVar("T")


@pytest.fixture
async def redis_url() -> AsyncIterator[str]:
    """A real redis-server on a free loopback port, for this test."""
    async with open_redis_server() as server:
        yield server.url


async def open_chat_db(path: Path) -> Database:
    """The chat database at ``path`` (on PostgreSQL: its data dir's database; see
    :mod:`.databases`), migrated (leases, fences, moved runs)."""
    return await open_database(path)


_LABEL: contextvars.ContextVar[tuple[str, int, int, int] | None] = contextvars.ContextVar(
    "label", default=None
)


class _RecordingDatabase:
    """The database's ``write``, recording the label of each write that commits, in
    the writer thread, under the write lock: the list is in commit order."""

    def __init__(self, db: Database, events: list[tuple[str, int, int, int]]) -> None:
        self._db = db
        self._events = events
        self.operations = db.operations

    async def write(self, fn: Callable[[Connection], T]) -> T:
        label = _LABEL.get()  # the worker thread runs in a copy of this context

        def recorded(conn: Connection) -> T:
            result = fn(conn)
            if label is not None:
                self._events.append(label)
            return result

        return await self._db.write(recorded)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        return await self._db.read(fn)

    async def ping(self, timeout: float) -> None:
        await self._db.ping(timeout)

    async def close(self) -> None:
        await self._db.close()


class RecordingSink(MovedChunks):
    """The real sink, which also records each of its writes that committed, in commit
    order: ``("fence", generation, 0, 0)`` and ``("move", generation, first, last)``."""

    def __init__(self, db: Database) -> None:
        self.events: list[tuple[str, int, int, int]] = []
        super().__init__(_RecordingDatabase(db, self.events))

    async def fence(self, session_id: str, generation: int) -> int:
        token = _LABEL.set(("fence", generation, 0, 0))
        try:
            return await super().fence(session_id, generation)
        finally:
            _LABEL.reset(token)

    async def move(self, session_id: str, generation: int, batch: Batch) -> None:
        label = ("move", generation, batch.first, batch.last) if batch.count else None
        token = _LABEL.set(label)
        try:
            await super().move(session_id, generation, batch)
        finally:
            _LABEL.reset(token)


class CollectingFold:
    """A fold that keeps the bytes it was fed, in order."""

    def __init__(self) -> None:
        self.fed: list[bytes] = []
        self.needs_chunks = True

    def feed(self, data: bytes) -> None:
        self.fed.append(data)

    @property
    def chunks(self) -> list[bytes]:
        return split_chunks(b"".join(self.fed))


class Proxy:
    """A TCP proxy on loopback to ``target``; :meth:`cut` drops every connection,
    :meth:`cut_live` waits for one first, :meth:`freeze` silences them (a partition:
    nobody sees a close)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.url = ""
        self.cuts = 0
        self._scopes: set[trio.CancelScope] = set()
        self._frozen: set[trio.CancelScope] = set()
        self._opened = trio.Event()

    def cut(self) -> None:
        """Close every connection through the proxy now (both sides see it drop)."""
        self.cuts += 1
        for scope in list(self._scopes):
            scope.cancel()

    async def cut_live(self) -> int:
        """Wait until a connection is open through the proxy (one not cut yet), then
        :meth:`cut`; the number of open connections it dropped (at least one)."""
        while not (live := [scope for scope in self._scopes if not scope.cancel_called]):
            self._opened = trio.Event()
            await self._opened.wait()
        self.cut()
        return len(live)

    def freeze(self) -> None:
        """Stop forwarding on every open connection, and keep its sockets open; new
        connections are forwarded."""
        self._frozen |= self._scopes

    async def _handle(self, client: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            self._opened.set()

            def frozen() -> bool:
                return scope in self._frozen

            try:
                upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
                async with client, upstream, trio.open_nursery() as nursery:
                    for source, sink in ((client, upstream), (upstream, client)):
                        nursery.start_soon(_pipe, source, sink, nursery.cancel_scope, frozen)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                self._scopes.discard(scope)
                self._frozen.discard(scope)
        await client.aclose()


async def _pipe(
    source: trio.SocketStream,
    sink: trio.SocketStream,
    done: trio.CancelScope,
    frozen: Callable[[], bool],
) -> None:
    try:
        while data := await source.receive_some(65536):
            if frozen():
                await trio.sleep_forever()  # swallowed: the peer hears nothing more
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    done.cancel()


async def start_proxy(nursery: trio.Nursery, target_url: str) -> Proxy:
    """A :class:`Proxy` to the server at ``target_url`` (``http://127.0.0.1:PORT``)."""
    proxy = Proxy(int(target_url.rsplit(":", 1)[1]))
    listeners = await nursery.start(trio.serve_tcp, proxy._handle, 0)
    port = listeners[0].socket.getsockname()[1]
    proxy.url = f"http://127.0.0.1:{port}"
    return proxy
