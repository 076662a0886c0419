"""A live reader that falls behind holds the session's writer back, for a while: the
next run waits until the reader wrote what it was offered, or, after ``live_hold``,
the reader is taken out of the live set (holding every chunk offered) and the writer
goes on. A session on a real buffer; the reader's subscriber is the test's own, so the
test decides when its client drains."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from sandstream.server.http.fanout import Offered
from sandstream.server.sessions.buffer import Run
from sandstream.server.sessions.counts import SessionCounts
from sandstream.server.sessions.session import LIVE_LAG_BYTES, LiveReader, Session
from tests.support.streams import open_buffer

LINE = b"x" * 1023 + b"\n"
RUN = LINE * 256  # 256 KiB, 256 chunks


class _SlowClient:
    """A live subscriber whose client takes nothing until :meth:`drain`: every run is
    queued."""

    def __init__(self) -> None:
        self.queued = 0
        self.offered: list[Run] = []
        self.written: list[Run] = []

    def offer(self, run: Run) -> Offered:
        first = not self.queued
        self.offered.append(run)
        self.queued += run.size
        return "queued" if first else "taken"

    async def write_backlog(self) -> None:
        await trio.lowlevel.checkpoint()

    def drain(self) -> None:
        self.written += self.offered[len(self.written) :]
        self.queued = 0


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    async with open_buffer(tmp_path) as buffer:
        key = await buffer.create("ses_hold", 1)
        yield Session(
            buffer, counts=SessionCounts(), key=key, id="ses_hold", created_at=1, live_hold=30
        )


async def _join(session: Session) -> tuple[LiveReader, _SlowClient]:
    client = _SlowClient()
    reader = LiveReader(client, session.last_cursor)
    assert session.join_live(reader)
    return reader, client


async def _fill(session: Session, client: _SlowClient) -> None:
    """Append runs until the reader is more than the lag behind."""
    while client.queued <= LIVE_LAG_BYTES:
        await session.append(RUN, count=256)
        await session.flush()


async def test_a_reader_behind_holds_the_next_run_until_it_wrote_its_backlog(
    session: Session,
) -> None:
    reader, client = await _join(session)
    await _fill(session, client)
    appended = trio.Event()

    async def append() -> None:
        await session.append(RUN, count=256)
        appended.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(append)
        await trio.testing.wait_all_tasks_blocked()
        assert not appended.is_set()  # held back by the reader
        client.drain()
        session.live_drained()
        await appended.wait()
    await session.flush()
    assert not reader.left  # still live: offered the run that waited
    assert client.offered[-1].last == session.last_cursor
    assert sum(run.count for run in client.offered) == session.last_cursor


async def test_a_reader_that_does_not_catch_up_in_time_is_taken_out_holding_every_chunk(
    tmp_path: Path,
) -> None:
    async with open_buffer(tmp_path) as buffer:
        key = await buffer.create("ses_stall", 1)
        session = Session(
            buffer, counts=SessionCounts(), key=key, id="ses_stall", created_at=1, live_hold=0.05
        )
        reader, client = await _join(session)
        await _fill(session, client)
        offered = session.last_cursor
        await session.append(RUN, count=256)  # waits out the hold, then goes on
        await session.flush()
        assert reader.left and reader.woken.is_set()
        assert reader.cursor == offered  # every chunk it was offered, none after
        assert sum(run.count for run in client.offered) == offered
        assert session.last_cursor == offered + 256
