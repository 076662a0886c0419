"""Fixtures for the runner tests: a workspace and a runner, both real servers on loopback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:  # pytest's `pythonpath = ["."]` normally does this
    sys.path.insert(0, _ROOT)

from sandstream.container.schemas import ConfigResponse, ScriptedAgent  # noqa: E402
from tests.server.harness import RunnerServer, start_runner  # noqa: E402
from tests.support.workspace import WorkspaceServer, start_workspace  # noqa: E402


@pytest.fixture
async def workspace(nursery: trio.Nursery) -> WorkspaceServer:
    """A workspace serving an empty env and a scripted agent that answers "Done."."""
    return await start_workspace(nursery, config=ConfigResponse(agent=ScriptedAgent()))


@pytest.fixture
async def server(nursery: trio.Nursery) -> RunnerServer:
    """A runner with the test token and default timeouts."""
    return await start_runner(nursery)
