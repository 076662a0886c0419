"""A stream store running in a test, and a session buffer on one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from sandstream.server.sessions import SessionBuffer
from sandstream.server.streams import StreamStore

__all__ = ["open_buffer", "running_store"]


@asynccontextmanager
async def running_store(directory: Path, **options: Any) -> AsyncIterator[StreamStore]:
    """A :class:`StreamStore` on ``directory``, recovered and running until the block
    ends (then checkpointed and closed, as at shutdown)."""
    store = StreamStore(directory, **options)
    scope = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await store.run(task_status=task_status)

    async with trio.open_nursery() as nursery:
        await nursery.start(run)
        try:
            yield store
        finally:
            scope.cancel()


@asynccontextmanager
async def open_buffer(data_dir: Path) -> AsyncIterator[SessionBuffer]:
    """A :class:`SessionBuffer` in ``data_dir``, its streams in ``data_dir/streams``."""
    async with running_store(data_dir / "streams") as store:
        buffer = await SessionBuffer.open(data_dir, store)
        try:
            yield buffer
        finally:
            await buffer.close()
