"""A stream holds a file descriptor only while it is written or read: 1,100 streams,
each written, under a 1,024-descriptor limit (``prlimit`` on a real ``serve``), leave
the process far below it; deleted, they leave it as it was; and a chat turn then runs
to its end, its session's stream written like any other."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import trio

from tests.chat.harness import DEADLINE, WORKSPACE, start_serve_process

STREAMS = 1100
LIMIT = 1024
AGENT = {"agent": {"kind": "scripted", "message": "still here"}}


def _open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _each(count: int, job: object) -> None:
    """Run ``job(n)`` for every n below ``count``, eight at a time."""
    limiter = trio.CapacityLimiter(8)

    async def one(n: int) -> None:
        async with limiter:
            await job(n)  # type: ignore[operator]

    async with trio.open_nursery() as nursery:
        for n in range(count):
            nursery.start_soon(one, n)


async def test_streams_hold_no_descriptor_at_rest_and_a_turn_runs_after_many(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    served = await start_serve_process(nursery, data_dir, AGENT)
    pid = served.process.pid
    limit = await trio.run_process(
        ["prlimit", "--pid", str(pid), f"--nofile={LIMIT}:{LIMIT}"], check=False
    )
    assert limit.returncode == 0
    runner_token = (data_dir / "runner-token").read_text().strip()
    api_token = (data_dir / "api-token").read_text().strip()
    before = _open_descriptors(pid)
    headers = {"Authorization": f"Bearer {runner_token}", "Content-Type": "text/plain"}
    async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=DEADLINE) as client:

        async def create(n: int) -> None:
            created = await client.put(f"/v1/stream/fd/{n}", content=b"first\n")
            assert created.status_code == 201, created.text
            appended = await client.post(f"/v1/stream/fd/{n}", content=b"second\n")
            assert appended.status_code in (200, 204), appended.text

        async def delete(n: int) -> None:
            deleted = await client.delete(f"/v1/stream/fd/{n}")
            assert deleted.status_code == 204, deleted.text

        with trio.fail_after(DEADLINE * 4):
            await _each(STREAMS, create)
        written = _open_descriptors(pid)
        assert written < before + 100, (before, written)  # not one per stream
        read = await client.get(f"/v1/stream/fd/{STREAMS - 1}", params={"offset": "-1"})
        assert read.content == b"first\nsecond\n"
        with trio.fail_after(DEADLINE * 4):
            await _each(STREAMS, delete)
    async with served.client(api_token) as client:
        body = {"workspaceId": WORKSPACE, "message": "one more"}
        with trio.fail_after(DEADLINE):
            async with client.stream("POST", "/api/assistant/chat/stream", json=body) as turn:
                assert turn.status_code == 200
                tail = b""
                async for chunk in turn.aiter_bytes():
                    tail = (tail + chunk)[-200:]
    assert b'"terminal":"result"' in tail, tail
