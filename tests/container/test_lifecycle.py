"""End to end: a scripted run against the workspace server, as a real subprocess."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import (
    ConfigResponse,
    EnvResponse,
    ScriptedAgent,
    ScriptedStep,
)
from tests.support.container import ContainerRun, run_container, run_in_process


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


async def test_an_unexpected_exception_is_internal_error(
    workspace: WorkspaceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_agent(spec: object) -> object:
        async def agent(ctx: object) -> str:
            raise ValueError("boom")

        return agent

    monkeypatch.setattr("sandstream.container.run.agent_for", broken_agent)
    run = await run_in_process(workspace.mint_dispatch())
    assert run.returncode == 1, run
    assert run.terminal["code"] == "internal_error"
    assert run.terminal["message"] == "internal error: ValueError: boom"
    assert not workspace.requests("results")


async def test_work_dir_is_temporary_by_default(workspace: WorkspaceServer) -> None:
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(
            steps=[ScriptedStep(tool="run_shell", args={"command": "pwd"})],
        )
    )
    run = await run_container(workspace.mint_dispatch())
    assert run.returncode == 0, run
    work = Path(run.steps()[-1]["result"]["stdout"].strip())
    assert work.name == "work"
    assert work.parent.name == "sandstream" or work.parent.name.startswith("sandstream-run-")
    assert not work.parent.exists()  # removed after the run


_BROKEN_MAIN = """
import sys
import sandstream.container.run as run

async def broken(*args, **kwargs):
    print("noise on stdout must not reach the envelope")
    raise RuntimeError("bug outside the run's guard")

run.run_container = broken
from sandstream.container.cli import main
raise SystemExit(main())
"""


async def test_a_bug_anywhere_still_ends_with_one_terminal(workspace: WorkspaceServer) -> None:
    result = await trio.run_process(
        [sys.executable, "-c", _BROKEN_MAIN],
        stdin=json.dumps(workspace.mint_dispatch()).encode(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    run = ContainerRun(result.returncode, result.stdout, result.stderr)
    assert run.returncode == 1
    assert run.terminal["code"] == "internal_error"
    assert "bug outside the run's guard" in run.terminal["message"]
    assert b"Traceback" in run.stderr
    assert b"noise on stdout" in run.stderr  # a stray print goes to stderr
