"""A live reader that falls behind holds the session's writer back, for a while: the
next run waits until the reader wrote what it was offered, or, after ``live_hold``,
the reader is taken out of the live set (holding every chunk offered) and the writer
goes on. A session on a real buffer, read by a :class:`Follow` whose subscriber is the
test's own, so the test decides when its client drains."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from sandstream.server.http.fanout import Offered
from sandstream.server.sessions import CaughtUp, Chunks, Follow, Run
from sandstream.server.sessions.counts import SessionCounts
from sandstream.server.sessions.session import LIVE_LAG_BYTES, Session
from sandstream.server.streams import LiveSubscriber
from tests.support.streams import open_buffer

LINE = b"x" * 1023 + b"\n"
RUN = LINE * 256  # 256 KiB, 256 chunks


class _SlowClient:
    """A live subscriber whose client takes nothing until :meth:`drain`: every run is
    queued, and writing the backlog waits for the drain."""

    def __init__(self) -> None:
        self.queued = 0
        self.offered: list[Run] = []
        self.written: list[Run] = []
        self._drained = trio.Event()

    def offer(self, run: Run) -> Offered:
        first = not self.queued
        self.offered.append(run)
        self.queued += run.size
        return "queued" if first else "taken"

    async def write_backlog(self) -> None:
        await self._drained.wait()
        self._drained = trio.Event()

    def drain(self) -> None:
        self.written += self.offered[len(self.written) :]
        self.queued = 0
        self._drained.set()


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    async with open_buffer(tmp_path) as buffer:
        key = await buffer.create("ses_hold", 1)
        yield Session(
            buffer, counts=SessionCounts(), key=key, id="ses_hold", created_at=1, live_hold=30
        )


def _follow(session: Session, client: _SlowClient) -> Follow:
    @asynccontextmanager
    async def subscribe() -> AsyncIterator[LiveSubscriber[Run] | None]:
        yield client

    return Follow(
        session, session.last_cursor, max_bytes=1 << 30, keepalive=60, subscribe=subscribe
    )


async def _until_live(session: Session) -> None:
    """Until the reader waits in the live set."""
    while not session.live_readers:
        await trio.testing.wait_all_tasks_blocked()


async def _fill(session: Session, client: _SlowClient) -> None:
    """Append runs until the reader is more than the lag behind."""
    while client.queued <= LIVE_LAG_BYTES:
        await session.append(RUN, count=256)
        await session.flush()


async def test_a_reader_behind_holds_the_next_run_until_it_wrote_its_backlog(
    session: Session,
) -> None:
    client = _SlowClient()
    follow = _follow(session, client)
    appended = trio.Event()

    async def append() -> None:
        await session.append(RUN, count=256)
        appended.set()

    assert isinstance(await follow.__anext__(), CaughtUp)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow.__anext__)  # waits live
        await _until_live(session)
        await _fill(session, client)
        nursery.start_soon(append)
        await trio.testing.wait_all_tasks_blocked()
        assert not appended.is_set()  # held back by the reader
        client.drain()
        await appended.wait()
        await session.flush()
        assert session.live_readers == 1  # still live: offered the run that waited
        assert client.offered[-1].last == session.last_cursor
        assert sum(run.count for run in client.offered) == session.last_cursor
        nursery.cancel_scope.cancel()


async def test_a_reader_that_does_not_catch_up_in_time_is_taken_out_holding_every_chunk(
    tmp_path: Path,
) -> None:
    async with open_buffer(tmp_path) as buffer:
        key = await buffer.create("ses_stall", 1)
        session = Session(
            buffer, counts=SessionCounts(), key=key, id="ses_stall", created_at=1, live_hold=0.05
        )
        client = _SlowClient()
        follow = _follow(session, client)
        read_on: list[Chunks] = []

        async def read() -> None:
            event = await follow.__anext__()
            assert isinstance(event, Chunks)
            read_on.append(event)

        assert isinstance(await follow.__anext__(), CaughtUp)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await _until_live(session)
            await _fill(session, client)
            offered = session.last_cursor
            await session.append(RUN, count=256)  # waits out the hold, then goes on
            await session.flush()
            assert session.live_readers == 0  # taken out
            assert sum(run.count for run in client.offered) == offered
            assert session.last_cursor == offered + 256
            client.drain()  # its backlog written, the reader reads on by itself
        assert read_on[0].first == offered + 1  # every chunk it was offered, none after
        assert read_on[0].last == session.last_cursor
