"""A chat's workspace on another replica and another runner: two chat servers, each with
its own data dir and embedded runner, on one PostgreSQL database (SQLite replicas share
one data dir, so a restart is their case: tests/chat/test_workspace_continuity.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from benchmarks.support.postgres_server import PostgresServer
from sandstream.core.schemas import ScriptedAgent
from tests.chat import databases
from tests.chat.harness import plans, shell, start_chat_server
from tests.chat.test_workspace_continuity import CHANGE, MAKE, stdout


@pytest.fixture
def one_database(postgres_server: PostgresServer, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """Two data dirs whose stores are one PostgreSQL database."""
    one, other = tmp_path / "one", tmp_path / "other"
    with databases.one_database(postgres_server, one, other):
        yield one, other


async def test_another_replica_and_its_runner_go_on_with_the_workspace(
    nursery: trio.Nursery, one_database: tuple[Path, Path]
) -> None:
    agent = plans(
        make=ScriptedAgent(steps=[shell(MAKE)], message="made"),
        change=ScriptedAgent(steps=[shell(CHANGE)], message="changed"),
    )
    one, other = one_database
    first = await start_chat_server(nursery, one, agent=agent)
    second = await start_chat_server(nursery, other, agent=agent)
    made = await first.turn("make it")
    assert made.kinds[-2:] == ["result", "done"], made.body[-800:]
    changed = await second.turn("change it", chat_id=made.chat_id)
    assert changed.kinds[-2:] == ["result", "done"], changed.body[-800:]
    assert stdout(changed).splitlines() == ["def f():", "    return 1"]
    back = await first.turn("change it", chat_id=made.chat_id)
    assert stdout(back).splitlines() == ["def f():", "    return 1", "    # changed"]
