"""The disk refuses a write (a file may grow no further: ``RLIMIT_FSIZE``, as a full
disk would): the append that hit it, and every later one, is refused with 503 and a
clear error, what was acknowledged before stays readable, and the runner restarted
on its data dir has every acknowledged byte, nothing torn, and takes appends again."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import trio

from tests.support.runner_process import start_runner_process

TOKEN = "disk-token"
PATH = "/v1/stream/full"
FILE_LIMIT = 6 * 1024 * 1024
"""The largest file the first runner may write: its SQLite files stay far below it, the
stream's log segment (64 MiB) reaches it."""
BODY = 512 * 1024


def _body(n: int) -> bytes:
    return (b"%06d" % n) * (BODY // 6) + b"\n" * (BODY % 6)


async def _read_all(client: httpx.AsyncClient) -> bytes:
    parts = []
    offset = "-1"
    while True:
        response = await client.get(PATH, params={"offset": offset})
        assert response.status_code == 200, response.text
        parts.append(response.content)
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            return b"".join(parts)


async def _stop(process: trio.Process) -> None:
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(30):
        await process.wait()


async def test_a_write_the_disk_refuses_fails_appends_clearly_and_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/octet-stream"}
    processes: list[trio.Process] = []
    acknowledged: list[bytes] = []
    try:
        async with trio.open_nursery() as nursery:
            limited = ("prlimit", f"--fsize={FILE_LIMIT}", "--")
            first, url = await start_runner_process(nursery, data_dir, TOKEN, wrapper=limited)
            processes.append(first)
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
                assert (await client.put(PATH)).status_code == 201
                refused = None
                for n in range(4 * FILE_LIMIT // BODY):
                    response = await client.post(PATH, content=_body(n))
                    if response.status_code != 204 and response.status_code != 200:
                        refused = response
                        break
                    acknowledged.append(_body(n))
                assert refused is not None, "the disk never refused a write"
                assert refused.status_code == 503, refused.text
                problem = refused.json()
                assert problem["type"] == "urn:sandstream:problem:stream-store-failed"
                assert "not stored" in problem["detail"] and "File too large" in problem["detail"]
                assert len(acknowledged) >= 4
                later = await client.post(PATH, content=b"later\n")
                assert later.status_code == 503, later.text
                assert await _read_all(client) == b"".join(acknowledged)
            await _stop(first)

            second, url = await start_runner_process(nursery, data_dir, TOKEN)
            processes.append(second)
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
                assert await _read_all(client) == b"".join(acknowledged), "lost or torn"
                again = await client.post(PATH, content=b"again\n")
                assert again.status_code in (200, 204), again.text
                assert await _read_all(client) == b"".join(acknowledged) + b"again\n"
            await _stop(second)
            nursery.cancel_scope.cancel()
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
