"""Fixtures for the Durable Streams tests: each server on loopback (:mod:`.servers`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.streams.servers import SERVERS, StreamServer, start_stream_server


@pytest.fixture(params=SERVERS)
async def stream_server(
    request: pytest.FixtureRequest, nursery: trio.Nursery, node: Path, tmp_path: Path
) -> StreamServer:
    """Each server in turn, with its data in this test's ``tmp_path``."""
    return await start_stream_server(nursery, request.param, node, tmp_path / request.param)
