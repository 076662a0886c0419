"""A chat's workspace across sandboxes, end to end: the chat server, its embedded runner,
real containers in bubblewrap; what one turn leaves in its work dir the next finds, and
nothing else (not its output, not what a process it left behind did after it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from sandstream.core.schemas import ScriptedAgent
from tests.chat.harness import WORKSPACE, TurnRun, plans, shell, start_chat_server

pytestmark = pytest.mark.usefixtures("chat_database")

MAKE = (
    "mkdir -p src && printf 'def f():\\n    return 1\\n' > src/f.py && chmod 750 src/f.py"
    " && ln -s src/f.py link && echo report > output/report.txt"
    # a process that leaves the tool's group and goes on writing after the turn
    " && (setsid sh -c 'while :; do echo tick >> ticks; sleep 0.01; done' >/dev/null 2>&1 &)"
    " && sleep 0.1"
)
LOOK = "cat link; stat -c %a src/f.py; ls output; wc -l < ticks; sleep 0.1; wc -l < ticks; pwd"


def stdout(run: TurnRun) -> str:
    step = run.folded().steps[-1]
    assert step.status == "succeeded" and step.result is not None, step
    result: dict[str, Any] = msgspec.json.decode(step.result)
    return str(result["stdout"])


async def test_the_next_turn_finds_the_work_dir_the_last_one_left(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    agent = plans(
        make=ScriptedAgent(steps=[shell(MAKE)], message="made"),
        look=ScriptedAgent(steps=[shell(LOOK)], message="looked"),
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    first = await server.turn("make it")
    assert first.kinds[-2:] == ["result", "done"], first.body[-800:]
    snapshot = await server.store.latest_snapshot(WORKSPACE, first.chat_id)
    assert snapshot is not None
    saved = {entry.path: entry for entry in snapshot.manifest.entries}
    assert sorted(saved) == ["home", "work", "work/link", "work/src", "work/src/f.py", "work/ticks"]
    assert (saved["work/src/f.py"].mode, saved["work/src/f.py"].size) == (0o750, 22)
    assert saved["work/link"].target == "src/f.py"

    second = await server.turn("look at it", chat_id=first.chat_id)
    assert second.kinds[-2:] == ["result", "done"], second.body[-800:]
    out = stdout(second).splitlines()
    assert out[:3] == ["def f():", "    return 1", "750"]
    # the writer was ended before the snapshot (which it would have torn): its file is
    # whole, and nothing writes it any more
    ticks = saved["work/ticks"].size // len("tick\n")
    assert out[3:5] == [str(ticks), str(ticks)]
    assert out[5] == "/tmp/sandstream/work"  # the same path in every sandbox
    # output/ is written back, not restored: the turn's own is empty
    chat = await server.chat(first.chat_id)
    first_files = [f["name"] for f in chat["messages"][1]["fileAttachments"]]
    assert first_files == ["report.txt"]
    assert chat["messages"][3].get("fileAttachments", []) == []


async def test_a_new_chat_starts_with_an_empty_workspace(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    agent = plans(
        make=ScriptedAgent(steps=[shell(MAKE)], message="made"),
        look=ScriptedAgent(steps=[shell("ls -A")], message="looked"),
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    assert (await server.turn("make it")).kinds[-2:] == ["result", "done"]
    other = await server.turn("look elsewhere")
    assert stdout(other).split() == ["output"]


CHANGE = "cat src/f.py; echo '    # changed' >> src/f.py"


async def test_the_workspace_outlives_a_restart(nursery: trio.Nursery, tmp_path: Path) -> None:
    agent = plans(
        make=ScriptedAgent(steps=[shell(MAKE)], message="made"),
        change=ScriptedAgent(steps=[shell(CHANGE)], message="changed"),
    )
    data_dir = tmp_path / "data"
    first = await start_chat_server(nursery, data_dir, agent=agent)
    made = await first.turn("make it")
    assert made.kinds[-2:] == ["result", "done"], made.body[-800:]
    await first.shutdown()
    again = await start_chat_server(nursery, data_dir, agent=agent)
    changed = await again.turn("change it", chat_id=made.chat_id)
    assert changed.kinds[-2:] == ["result", "done"], changed.body[-800:]
    assert stdout(changed).splitlines() == ["def f():", "    return 1"]
