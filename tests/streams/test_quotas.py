"""The HTTP API's quotas on a real runner: a stream past the most streams held is 429
until one is deleted; an append (plain or raw-routed, or a create's body) past the bytes
one stream may hold is 413, nothing of it stored, and smaller ones still fit; a path
past its length is 400. The sessions' own streams count against none of them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.server.streams import StreamSettings
from tests.server.harness import load
from tests.sessions.harness import create, start_sessions, wait_state
from tests.streams.servers import read_stream

MAX_STREAMS = 5
MAX_BYTES = 4096
PREFIX = "/v1/stream/quota/"
TEXT = {"Content-Type": "text/plain"}


async def test_quotas_bound_what_the_api_writes(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    streams = StreamSettings(
        directory=tmp_path / "streams",
        max_streams=MAX_STREAMS,
        max_stream_bytes=MAX_BYTES,
        max_path_chars=200,
    )
    runner = await start_sessions(nursery, tmp_path, streams=streams)
    async with runner.client() as client:
        for n in range(MAX_STREAMS):
            assert (await client.put(f"{PREFIX}{n}", headers=TEXT)).status_code == 201
        refused = await client.put(f"{PREFIX}extra", headers=TEXT)
        assert refused.status_code == 429, refused.text
        problem = refused.json()
        assert problem["type"] == "urn:sandstream:problem:stream-quota"
        assert "delete one" in problem["detail"]
        assert (await client.head(f"{PREFIX}extra")).status_code == 404  # nothing made
        again = await client.put(f"{PREFIX}0", headers=TEXT)  # an idempotent create: no new one
        assert again.status_code == 200, again.text
        assert (await client.delete(f"{PREFIX}0")).status_code == 204
        assert (await client.put(f"{PREFIX}extra", headers=TEXT)).status_code == 201

        path = f"{PREFIX}1"
        kept = b"x" * (MAX_BYTES // 2)
        assert (await client.post(path, content=kept, headers=TEXT)).status_code == 204
        full = await client.post(path, content=b"y" * (MAX_BYTES // 2), headers=TEXT)
        assert full.status_code == 413, full.text
        assert full.json()["type"] == "urn:sandstream:problem:stream-full"
        chunked = await client.post(path, content=_chunks(b"z" * MAX_BYTES), headers=TEXT)
        assert chunked.status_code == 413, chunked.text  # through Quart, not the raw route
        assert (await client.post(path, content=b"fits", headers=TEXT)).status_code == 204
        assert await read_stream(client, path) == kept + b"fits"
        assert (await client.delete(f"{PREFIX}2")).status_code == 204
        too_big = await client.put(f"{PREFIX}2", content=b"w" * (MAX_BYTES + 1), headers=TEXT)
        assert too_big.status_code == 413, too_big.text
        assert (await client.head(f"{PREFIX}2")).status_code == 404

        long_path = PREFIX + "p" * 200
        for method in ("PUT", "GET", "HEAD", "DELETE"):
            answer = await client.request(method, long_path, headers=TEXT)
            assert answer.status_code == 400, (method, answer.status_code)

        # The sessions' own streams are not the API's: a session runs at the quota, and
        # writes more than an API stream may hold.
        workspace.config = load(100, rate=0, payload_bytes=200)
        session_id = await create(client, workspace.mint_dispatch("go"))
        status = await wait_state(client, session_id, "completed")
        assert status["terminal"]["type"] == "result"


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 1024):
        yield data[start : start + 1024]
