"""Fixtures for the runner tests: a real runner on loopback (the workspace: tests/conftest.py)."""

from __future__ import annotations

import pytest
import trio

from tests.server.harness import RunnerServer, start_runner


@pytest.fixture
async def server(nursery: trio.Nursery) -> RunnerServer:
    """A runner with the test token and default timeouts."""
    return await start_runner(nursery)
