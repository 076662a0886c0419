"""The disk refuses a write (a file may grow no further: ``RLIMIT_FSIZE``, as a full
disk would): the append that hit it is refused with 503 and a clear error, nothing of
it stored; the store is not stuck: a later append that fits is stored, one that does
not is refused again; what was acknowledged stays readable, and the runner restarted on
its data dir has every acknowledged byte, nothing torn, and takes appends."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import trio

from benchmarks.support.runner_process import RunnerProcess, start_runner_process
from tests.streams.servers import read_stream

TOKEN = "disk-token"
PATH = "/v1/stream/full"
FILE_LIMIT = 6 * 1024 * 1024
"""The largest file the first runner may write: its SQLite files stay far below it, the
stream's log segment (64 MiB) reaches it."""
BODY = 512 * 1024


def _body(n: int) -> bytes:
    return (b"%06d" % n) * (BODY // 6) + b"\n" * (BODY % 6)


async def _start(
    nursery: trio.Nursery, data_dir: Path, wrapper: tuple[str, ...] = ()
) -> RunnerProcess:
    args = ("--data-dir", str(data_dir), "--container-stderr", "discard")
    return await start_runner_process(nursery, *args, token=TOKEN, wrapper=wrapper)


async def _stop(runner: RunnerProcess) -> None:
    runner.process.send_signal(signal.SIGTERM)
    with trio.fail_after(30):
        await runner.process.wait()


async def test_a_write_the_disk_refuses_fails_appends_clearly_and_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/octet-stream"}
    acknowledged: list[bytes] = []
    async with trio.open_nursery() as nursery:
        first = await _start(nursery, data_dir, ("prlimit", f"--fsize={FILE_LIMIT}", "--"))
        async with httpx.AsyncClient(base_url=first.url, headers=headers, timeout=30) as client:
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
            assert await read_stream(client, PATH) == b"".join(acknowledged)
            again = await client.post(PATH, content=_body(len(acknowledged)))
            assert again.status_code == 503, again.text  # still too large: tried, refused
            later = await client.post(PATH, content=b"later\n")
            assert later.status_code in (200, 204), later.text  # it fits: stored
            acknowledged.append(b"later\n")
            assert await read_stream(client, PATH) == b"".join(acknowledged)
        await _stop(first)

        second = await _start(nursery, data_dir)
        async with httpx.AsyncClient(base_url=second.url, headers=headers, timeout=30) as client:
            assert await read_stream(client, PATH) == b"".join(acknowledged), "lost or torn"
            after = await client.post(PATH, content=b"after\n")
            assert after.status_code in (200, 204), after.text
            assert await read_stream(client, PATH) == b"".join(acknowledged) + b"after\n"
        await _stop(second)
        nursery.cancel_scope.cancel()
