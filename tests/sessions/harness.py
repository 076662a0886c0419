"""A runner with durable sessions on loopback, and the calls the session tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import trio

from benchmarks.support.session_client import ReadResult, read_session
from sandstream.server.sessions import SessionService, SessionSettings, get_sessions
from tests.server.harness import TOKEN, RunnerServer, start_runner

SERVER_BACKLOG = 2048
"""Hypercorn's accept queue (default 100): a thousand readers connect at once."""

__all__ = ["TOKEN", "create", "read_all", "session_service", "start_sessions", "wait_state"]


async def start_sessions(
    nursery: trio.Nursery, data_dir: Path, **session_options: Any
) -> RunnerServer:
    """A runner serving ``/sessions`` with its buffer in ``data_dir``."""
    sessions = SessionSettings(data_dir=data_dir, **session_options)
    return await start_runner(nursery, sessions=sessions, backlog=SERVER_BACKLOG)


def session_service(server: RunnerServer) -> SessionService:
    return get_sessions(server.app)


async def create(client: httpx.AsyncClient, dispatch: dict[str, Any]) -> str:
    """``POST /sessions``; return the new session's id (asserting the 201)."""
    response = await client.post("/sessions", json=dispatch)
    assert response.status_code == 201, response.text
    session_id: str = response.json()["id"]
    assert response.headers["Location"] == f"/sessions/{session_id}"
    return session_id


async def read_all(server: RunnerServer, session_id: str, cursor: int = 0) -> ReadResult:
    """Every chunk after ``cursor`` to the end, over NDJSON."""
    with trio.fail_after(60):
        result = await read_session(server.url, session_id, TOKEN, "ndjson", cursor)
    assert result.status == 200, result.body
    return result


async def wait_state(
    client: httpx.AsyncClient, session_id: str, state: str, timeout: float = 30.0
) -> dict[str, Any]:
    """Poll the status until ``state``; return it."""
    with trio.fail_after(timeout):
        while True:
            response = await client.get(f"/sessions/{session_id}/status")
            assert response.status_code == 200, response.text
            status: dict[str, Any] = msgspec.json.decode(response.content)
            if status["state"] == state:
                return status
            await trio.sleep(0.02)
