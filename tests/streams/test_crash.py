"""SIGKILL the runner while producers append to a stream, restart it on its data dir:
every acknowledged append is there, once, in order, and nothing is torn; the producers
carry on where the log says they stopped."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx
import trio

from benchmarks.support.runner_process import start_runner_process
from tests.streams.servers import read_stream

TOKEN = "crash-token"
WRITERS = 4
PATH = "/v1/stream/crash"
FILLER = b"." * 200
TOKEN_PATTERN = re.compile(rb"<w(\d):(\d{6})>\.{200}\n")


def _payload(writer: int, seq: int) -> bytes:
    return b"<w%d:%06d>" % (writer, seq) + FILLER + b"\n"


async def _produce(client: httpx.AsyncClient, writer: int, seq: int) -> httpx.Response:
    """Writer ``writer``'s append number ``seq``, as its idempotent producer (epoch 0)."""
    headers = {
        "Content-Type": "text/plain",
        "Producer-Id": f"w{writer}",
        "Producer-Epoch": "0",
        "Producer-Seq": str(seq),
    }
    return await client.post(PATH, content=_payload(writer, seq), headers=headers)


async def _producer(
    client: httpx.AsyncClient, writer: int, acked: list[int], enough: trio.Event
) -> None:
    seq = 0
    try:
        while True:
            response = await _produce(client, writer, seq)
            assert response.status_code == 200, response.text
            acked.append(seq)
            seq += 1
            if len(acked) >= 50:
                enough.set()
    except httpx.TransportError:
        return  # the runner died under it


async def test_sigkill_mid_append_loses_no_acknowledged_append(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    acked: list[list[int]] = [[] for _ in range(WRITERS)]
    args = ("--data-dir", str(data_dir), "--container-stderr", "discard")
    async with trio.open_nursery() as nursery:
        first = await start_runner_process(nursery, *args, token=TOKEN)
        async with httpx.AsyncClient(base_url=first.url, headers=headers, timeout=30) as client:
            created = await client.put(PATH, headers={"Content-Type": "text/plain"})
            assert created.status_code == 201
            enough = trio.Event()
            async with trio.open_nursery() as writers:
                for writer in range(WRITERS):
                    writers.start_soon(_producer, client, writer, acked[writer], enough)
                with trio.fail_after(60):
                    await enough.wait()
                first.process.send_signal(signal.SIGKILL)
                await first.process.wait()

        second = await start_runner_process(nursery, *args, token=TOKEN)
        async with httpx.AsyncClient(base_url=second.url, headers=headers, timeout=30) as client:
            content = await read_stream(client, PATH)
            tokens = TOKEN_PATTERN.findall(content)
            assert b"".join(_payload(int(w), int(s)) for w, s in tokens) == content, (
                "a torn or foreign byte in the log"
            )
            stored: list[list[int]] = [[] for _ in range(WRITERS)]
            for writer, seq in tokens:
                stored[int(writer)].append(int(seq))
            for writer in range(WRITERS):
                seqs = stored[writer]
                assert seqs == list(range(len(seqs))), "out of order, twice, or a gap"
                assert set(acked[writer]) <= set(seqs), "an acknowledged append was lost"
                # The producer's state came back with the log: a retry of its last
                # stored append is a duplicate, the next one is new.
                last = seqs[-1]
                for seq, status in ((last, 204), (last + 1, 200)):
                    retry = await _produce(client, writer, seq)
                    assert retry.status_code == status, retry.text
        second.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await second.process.wait()
        nursery.cancel_scope.cancel()
    assert sum(map(len, acked)) >= 50
