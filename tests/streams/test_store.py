"""The stream store on a real directory: what survives a restart, a torn write, a
fork chain, a deletion; what each write puts on disk."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from sandstream.server.streams import (
    StreamClosedError,
    StreamConfig,
    StreamGoneError,
    StreamNotFoundError,
    StreamStore,
    SyncPolicy,
)
from sandstream.server.streams.records import HEADER, ProducerStamp
from tests.support.streams import running_store

TEXT = StreamConfig("text/plain", None, None)


async def _read_all(store: StreamStore, path: str) -> bytes:
    stream = store.get(path)
    position = store.first_position(stream)
    parts = []
    while position < stream.tail:
        chunk = await store.read(stream, position, 5)
        parts.append(chunk.payload)
        position = chunk.next
    return b"".join(parts)


async def _append(
    store: StreamStore,
    path: str,
    data: bytes,
    *,
    content_type: str = "text/plain",
    producer: ProducerStamp | None = None,
    stream_seq: str | None = None,
    close: bool = False,
) -> None:
    await store.append(
        store.get(path),
        data,
        content_type=content_type,
        producer=producer,
        stream_seq=stream_seq,
        close=close,
    )


async def test_appends_survive_a_restart_with_their_producer_state(tmp_path: Path) -> None:
    async with running_store(tmp_path) as store:
        await store.create("/v1/stream/a", TEXT, b"zero ", closed=False)
        for seq, word in enumerate([b"one ", b"two "]):
            await _append(store, "/v1/stream/a", word, producer=ProducerStamp("p", 4, seq))
        await _append(store, "/v1/stream/a", b"end", stream_seq="b", close=True)
        tail = store.get("/v1/stream/a").tail
    async with running_store(tmp_path) as store:
        stream = store.get("/v1/stream/a")
        assert await _read_all(store, "/v1/stream/a") == b"zero one two end"
        assert (stream.tail, stream.closed, stream.stream_seq) == (tail, True, "b")
        assert stream.producers["p"].epoch == 4 and stream.producers["p"].last_seq == 1
        with pytest.raises(StreamClosedError):
            await _append(store, "/v1/stream/a", b"more")


async def test_a_torn_last_record_is_cut_at_restart(tmp_path: Path) -> None:
    async with running_store(tmp_path) as store:
        await store.create("/v1/stream/t", TEXT, b"whole", closed=False)
        stream = store.get("/v1/stream/t")
        tail = stream.tail
        segment = next(stream.log.directory.iterdir())
    with segment.open("ab") as file:  # half a record: a write the crash interrupted
        file.write((100).to_bytes(4, "little") + b"\0\0\0\0" + b"torn")
    async with running_store(tmp_path) as store:
        assert store.get("/v1/stream/t").tail == tail
        assert segment.stat().st_size == tail
        await _append(store, "/v1/stream/t", b" again")
        assert await _read_all(store, "/v1/stream/t") == b"whole again"


async def test_each_append_is_written_once_with_its_frame(tmp_path: Path) -> None:
    async with running_store(tmp_path, segment_bytes=1000) as store:
        await store.create("/v1/stream/s", TEXT, b"", closed=False)
        for _ in range(40):
            await _append(store, "/v1/stream/s", b"x" * 100)
        stream = store.get("/v1/stream/s")
        files = sorted(stream.log.directory.iterdir())
        assert len(files) > 1  # rolled over into several segments
        assert sum(f.stat().st_size for f in files) == 40 * (100 + HEADER + 1)
        assert await _read_all(store, "/v1/stream/s") == b"x" * 4000


async def test_forks_read_through_their_sources_and_outlive_them(tmp_path: Path) -> None:
    async with running_store(tmp_path) as store:
        await store.create("/v1/stream/src", TEXT, b"A", closed=False)
        await _append(store, "/v1/stream/src", b"B")
        middle = store.get("/v1/stream/src").tail
        await _append(store, "/v1/stream/src", b"C")
        fork = StreamConfig("text/plain", None, None, "/v1/stream/src", middle)
        await store.create("/v1/stream/fork", fork, b"x", closed=False)
        assert await _read_all(store, "/v1/stream/fork") == b"ABx"
        await store.delete("/v1/stream/src")
        with pytest.raises(StreamGoneError):
            store.get("/v1/stream/src")
        assert await _read_all(store, "/v1/stream/fork") == b"ABx"
    async with running_store(tmp_path) as store:
        assert await _read_all(store, "/v1/stream/fork") == b"ABx"
        source_dir = tmp_path / "logs" / str(store._streams["/v1/stream/src"].key)
        await store.delete("/v1/stream/fork")
        with pytest.raises(StreamNotFoundError):
            store.get("/v1/stream/src")
        assert not source_dir.exists()
        assert not any((tmp_path / "logs").iterdir())


async def test_interval_sync_keeps_what_was_written(tmp_path: Path) -> None:
    async with running_store(tmp_path, sync=SyncPolicy.parse("0.05")) as store:
        await store.create("/v1/stream/i", TEXT, b"a", closed=False)
        await _append(store, "/v1/stream/i", b"b", producer=ProducerStamp("p", 0, 0))
    async with running_store(tmp_path) as store:
        assert await _read_all(store, "/v1/stream/i") == b"ab"
        assert store.get("/v1/stream/i").producers["p"].last_seq == 0


def _syncing_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("streams-sync")]


async def test_a_commit_syncs_many_logs_at_once_and_its_threads_stop_with_the_store(
    tmp_path: Path,
) -> None:
    paths = [f"/v1/stream/m{i}" for i in range(20)]
    async with running_store(tmp_path) as store:
        for path in paths:
            await store.create(path, TEXT, b"", closed=False)
        async with trio.open_nursery() as nursery:
            for path in paths:
                nursery.start_soon(_append, store, path, path.encode())
        assert _syncing_threads()  # the appends were committed together
    assert not _syncing_threads()
    async with running_store(tmp_path) as store:
        for path in paths:
            assert await _read_all(store, path) == path.encode()


def test_sync_policies_parse() -> None:
    assert SyncPolicy.parse("commit").mode == "commit"
    assert SyncPolicy.parse("0.5").interval == 0.5
    for bad in ("0", "-1", "inf", "often"):
        with pytest.raises(ValueError):
            SyncPolicy.parse(bad)
