"""Unbounded turns: a container that floods steps keeps the server and the row bounded."""

from __future__ import annotations

import signal
from pathlib import Path

import msgspec
import psutil
import pytest
import trio

from tests.chat.databases import open_store
from tests.chat.harness import DEADLINE, WORKSPACE, start_serve_process

pytestmark = pytest.mark.usefixtures("chat_database")

STEP_LINES = 200_000
"""Step lines the flood sends: 100 000 steps, 50 times the bound below."""
MAX_STEPS = 2000
MAX_BYTES = 1024 * 1024
FLOOD = {
    "agent": {
        "kind": "scripted",
        "load": {"lines": STEP_LINES, "payload_bytes": 200, "line_type": "step"},
        "message": "flooded",
    }
}


async def _sample_rss(pid: int, peak: list[int], stop: trio.Event) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        peak[0] = max(peak[0], process.memory_info().rss)
        with trio.move_on_after(0.02):
            await stop.wait()


async def test_a_step_flood_streams_whole_but_stores_and_holds_a_bounded_turn(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    served = await start_serve_process(
        nursery,
        data_dir,
        FLOOD,
        "--max-turn-steps", str(MAX_STEPS),
        "--max-turn-bytes", str(MAX_BYTES),
    )  # fmt: skip
    token = (data_dir / "api-token").read_text().strip()
    baseline = psutil.Process(served.process.pid).memory_info().rss
    peak = [baseline]
    stop = trio.Event()
    nursery.start_soon(_sample_rss, served.process.pid, peak, stop)
    step_frames = 0
    tail = b""
    body = {"workspaceId": WORKSPACE, "message": "flood"}
    with trio.fail_after(DEADLINE * 5):
        async with (
            served.client(token) as client,
            client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
        ):
            assert response.status_code == 200
            chat_id = response.headers["x-chat-id"]
            async for chunk in response.aiter_bytes():
                window = tail + chunk
                step_frames += window.count(b"\nevent: step\n") - tail.count(b"\nevent: step\n")
                tail = window[-64:]
    stop.set()
    served.process.send_signal(signal.SIGTERM)
    with trio.fail_after(DEADLINE):
        await served.exited.wait()
    # The live stream carried every step line the core validated.
    assert step_frames == STEP_LINES
    assert tail.rstrip().endswith(b'"terminal":"result","diagnostics":0}')
    # The server held a bounded turn: 200 000 steps did not grow it by their size
    # (the unbounded server grew by 330 MiB here; this one grows by 60-70 MiB, the
    # session's tail and batches, SQLite's page caches and its threads' malloc arenas).
    growth = peak[0] - baseline
    assert growth < 100 * 1024 * 1024, f"RSS grew by {growth / 2**20:.0f} MiB"

    store = await open_store(data_dir)
    try:
        row_bytes = await store.db.read(
            lambda conn: conn.execute(
                "SELECT length(body) FROM messages WHERE chat_id = ? AND role = 'assistant'",
                (chat_id,),
            ).fetchone()[0]
        )
        [_, answer] = await store.get_messages(WORKSPACE, chat_id)
    finally:
        await store.close()
    assert row_bytes < 2 * MAX_BYTES  # unbounded: tens of MB
    assert answer.status == "complete"
    blocks = msgspec.to_builtins(answer.content)
    steps = next(b for b in blocks if b["type"] == "steps")["steps"]
    omitted = next(b for b in blocks if b["type"] == "steps_omitted")
    total = STEP_LINES // 2
    assert len(steps) + omitted["steps"] == total
    assert len(steps) <= MAX_STEPS
    assert omitted["bytes"] > 0
    assert omitted["message"] == f"{omitted['steps']} more steps omitted ({omitted['bytes']} bytes)"
