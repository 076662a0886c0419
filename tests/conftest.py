"""Test-wide settings and fixtures.

Hypothesis runs without deadlines: CI machines are shared and slow.
"""

import pytest
import trio
from hypothesis import settings

from sandstream.container.schemas import ConfigResponse, ScriptedAgent
from tests.support.workspace import WorkspaceServer, start_workspace

settings.register_profile("sandstream", deadline=None)
settings.load_profile("sandstream")


@pytest.fixture
async def workspace(nursery: trio.Nursery) -> WorkspaceServer:
    """A workspace serving an empty env and a scripted agent that answers "Done."."""
    return await start_workspace(nursery, config=ConfigResponse(agent=ScriptedAgent()))
