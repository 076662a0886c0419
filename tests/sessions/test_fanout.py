"""Fan-out: many readers that drop at random moments and resume from their last cursor."""

from __future__ import annotations

import random
from pathlib import Path

import trio

from benchmarks.support.session_client import ReadResult, Transport, read_session
from benchmarks.support.workspace import WorkspaceServer
from tests.server.harness import load
from tests.sessions.harness import TOKEN, create, read_all, start_sessions, wait_state

SUBSCRIBERS = 1000
LINES = 150
TRANSPORTS: tuple[Transport, ...] = ("sse", "ndjson", "ws", "ws-batch")


async def test_1000_readers_dropping_and_resuming_each_get_the_whole_output_once(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(LINES, rate=100, payload_bytes=100)
    outputs: dict[int, list[bytes]] = {}
    reconnects = [0]
    mid_frame_cuts = [0]

    async def subscriber(index: int, session_id: str) -> None:
        rng = random.Random(index)
        transport = TRANSPORTS[index % len(TRANSPORTS)]
        await trio.sleep(rng.random() * 1.5)  # join at a random moment of the run
        got: list[bytes] = []
        cursor = 0
        for attempt in range(50):
            if attempt < 4 and rng.random() < 0.8:
                budget = rng.randint(1, 30) if transport.startswith("ws") else rng.randint(1, 8_000)
            else:
                budget = None
            result: ReadResult = await read_session(
                server.url,
                session_id,
                TOKEN,
                transport,
                cursor,
                budget=budget,
                use_last_event_id=transport == "sse" and attempt % 2 == 1,
            )
            cut_before_the_head = budget is not None and result.status == 0
            assert result.status in (200, 101) or cut_before_the_head, result.body
            got += result.chunks
            cursor = result.cursor
            if result.closed:
                break
            reconnects[0] += 1
            if budget is not None and not transport.startswith("ws"):
                mid_frame_cuts[0] += 1
        else:
            raise AssertionError(f"reader {index} never saw the end")
        outputs[index] = got

    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("fan out"))
        with trio.fail_after(240):
            async with trio.open_nursery() as readers:
                for index in range(SUBSCRIBERS):
                    readers.start_soon(subscriber, index, session_id)
        await wait_state(client, session_id, "completed")
    whole = b"".join((await read_all(server, session_id)).chunks)
    # bootstrap and skills logs, the load lines, the writeback log, the result
    assert whole.count(b"\n") == LINES + 4
    assert len(outputs) == SUBSCRIBERS
    for index, chunks in outputs.items():
        assert b"".join(chunks) == whole, f"reader {index} ({TRANSPORTS[index % len(TRANSPORTS)]})"
    assert reconnects[0] > SUBSCRIBERS  # they really did drop and resume
    assert mid_frame_cuts[0] > 0
