"""Fixtures for the chat backend tests: a real chat server with the embedded runner."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.chat.harness import ChatServer, plans, sleeping, start_chat_server


@pytest.fixture
async def server(nursery: trio.Nursery, tmp_path: Path) -> ChatServer:
    """A chat server (embedded runner). Prompts starting with ``slow`` sleep 300 s in a
    tool, ``nap`` 1.5 s; any other prompt is answered "Done: {prompt}" at once."""
    agent = plans(slow=sleeping(300), nap=sleeping(1.5))
    return await start_chat_server(nursery, tmp_path / "data", agent=agent)
