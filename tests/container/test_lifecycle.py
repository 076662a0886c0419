"""End to end: a scripted run against the workspace server, as a real subprocess."""

from __future__ import annotations

from pathlib import Path

from sandstream.container.schemas import (
    ConfigResponse,
    EnvResponse,
    ScriptedAgent,
    ScriptedStep,
)
from tests.support.container import run_container
from tests.support.workspace import WorkspaceServer


async def test_scripted_run_streams_steps_result_and_writes_back(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    workspace.env = EnvResponse(vars={"GREETING": "bonjour"})
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(
            steps=[
                ScriptedStep(
                    tool="write_file",
                    args={"path": "output/notes/hello.md", "content": "# hi\n"},
                ),
                ScriptedStep(tool="run_shell", args={"command": "echo $GREETING"}),
                ScriptedStep(tool="list_files", args={"path": "output", "recursive": True}),
            ],
            message="You said: {prompt}",
        )
    )
    run = await run_container(workspace.mint_dispatch("ping"), "--work-dir", str(work_dir))

    assert run.returncode == 0, run
    assert run.terminal["type"] == "result"
    assert run.terminal["message"] == "You said: ping"
    rows = run.turn.steps
    assert [row.name for row in rows] == ["write_file", "run_shell", "list_files"]
    assert all(row.status == "succeeded" for row in rows)
    steps = run.steps()
    assert [s["status"] for s in steps] == ["running", "succeeded"] * 3
    assert steps[3]["result"]["stdout"] == "bonjour\n"
    assert steps[5]["result"]["entries"] == [
        {"path": "output/notes", "type": "dir"},
        {"path": "output/notes/hello.md", "type": "file", "size": 5},
    ]
    assert all(isinstance(s["durationMs"], int) for s in steps if s["status"] != "running")
    assert all(isinstance(line["ts"], int) for line in run.lines)
    # Writeback: the output dir's files, by relative path, with the upload token.
    assert [(u.path, u.content) for u in workspace.uploads] == [("notes/hello.md", b"# hi\n")]
    assert [r.route for r in workspace.redemptions] == ["env", "config", "results"]
    assert all(r.status in (200, 201) for r in workspace.redemptions)
