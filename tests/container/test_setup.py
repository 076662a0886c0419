"""The environment's setup script: logs, env, work dir, failure and timeout."""

from __future__ import annotations

from pathlib import Path

from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import ConfigResponse, EnvResponse, ScriptedAgent, ScriptedStep
from tests.support.container import run_in_process, wait_group_gone


async def test_setup_output_becomes_log_lines(workspace: WorkspaceServer, work_dir: Path) -> None:
    workspace.env = EnvResponse(
        vars={"PROJECT": "demo"},
        setup_script='echo "setting up $PROJECT"\necho "in $(pwd)"\necho warning >&2\n'
        "printf 'no newline at the end'\ntouch prepared.flag\n",
    )
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(steps=[ScriptedStep(tool="read_file", args={"path": "prepared.flag"})])
    )
    run = await run_in_process(workspace.mint_dispatch(), "--work-dir", str(work_dir))
    assert run.returncode == 0, run
    logs = [(line["level"], line["message"]) for line in run.lines if line["type"] == "log"]
    assert ("info", "setup: setting up demo") in logs
    assert ("info", f"setup: in {work_dir.resolve()}") in logs
    assert ("warn", "setup: warning") in logs
    assert ("info", "setup: no newline at the end") in logs
    # The agent ran after the setup script, in the same work dir.
    assert run.turn.steps[0].status == "succeeded"


async def test_failing_setup_script_is_setup_failed(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    workspace.env = EnvResponse(
        setup_script="echo installing\necho 'E: Unable to locate package nope' >&2\nexit 100\n"
    )
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(
            steps=[ScriptedStep(tool="write_file", args={"path": "output/x", "content": "x"})]
        )
    )
    run = await run_in_process(workspace.mint_dispatch(), "--work-dir", str(work_dir))
    assert run.returncode == 1, run
    assert run.terminal["code"] == "setup_failed"
    assert "exited with status 100" in run.terminal["message"]
    assert "Unable to locate package nope" in run.terminal["message"]
    assert run.steps() == []  # the agent never started
    assert not workspace.requests("results")  # a failed run writes nothing back
    assert "setup: installing" in run.logs


async def test_setup_script_timeout_kills_its_process_group(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    workspace.env = EnvResponse(
        setup_script="sleep 300 &\necho $! > bg.pid\necho $$ > setup.pid\nwait\n",
        setup_timeout_sec=1.0,
    )
    run = await run_in_process(workspace.mint_dispatch(), "--work-dir", str(work_dir))
    assert run.returncode == 1, run
    assert run.terminal["code"] == "setup_failed"
    assert "timed out after 1s" in run.terminal["message"]
    leader = int((work_dir / "setup.pid").read_text())
    await wait_group_gone(leader, [leader, int((work_dir / "bg.pid").read_text())])


async def test_setup_script_does_not_read_the_rest_of_itself_from_stdin(
    workspace: WorkspaceServer,
) -> None:
    workspace.env = EnvResponse(setup_script="cat\necho after-cat\n")
    run = await run_in_process(workspace.mint_dispatch())
    assert run.returncode == 0, run
    assert "setup: after-cat" in run.logs


async def test_the_setup_script_can_signal_only_what_it_started(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    """Its Landlock domain: the container (its parent) is out of its reach, its own
    children are not."""
    workspace.env = EnvResponse(
        setup_script="kill -0 $PPID 2>/dev/null && echo container-reached "
        "|| echo container-refused\nsleep 5 & kill $! && echo own-child-reached\n"
    )
    run = await run_in_process(workspace.mint_dispatch(), "--work-dir", str(work_dir))
    assert run.returncode == 0, run
    assert "setup: container-refused" in run.logs
    assert "setup: own-child-reached" in run.logs
