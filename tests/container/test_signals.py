"""SIGTERM/SIGINT and the runtime cap: stop fast, kill tool groups, write nothing back."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import (
    ClaudeCodeAgent,
    ConfigResponse,
    ScriptedAgent,
    ScriptedStep,
)
from tests.support import TRANSCRIPTS, fake_claude
from tests.support.container import (
    ContainerRun,
    RunningContainer,
    catches_signal,
    run_container,
    start_container,
    wait_for_file,
    wait_group_gone,
)

_SHELL = "sleep 300 & echo $! > sleeper.pid; echo $$ > shell.pid; wait"
_WRITE = ScriptedStep(tool="write_file", args={"path": "output/partial.md", "content": "wip"})


def _plan(*steps: ScriptedStep, **config: object) -> ConfigResponse:
    return ConfigResponse(agent=ScriptedAgent(steps=list(steps)), **config)  # type: ignore[arg-type]


async def _signal_and_wait(container: RunningContainer, sig: int) -> tuple[ContainerRun, float]:
    started = trio.current_time()
    container.send_signal(sig)
    run = await container.wait()
    return run, trio.current_time() - started


def _assert_cancelled(run: ContainerRun, sig: signal.Signals) -> None:
    assert run.returncode == 128 + sig, run
    assert run.terminal["type"] == "error"
    assert run.terminal["code"] == "cancelled"
    assert run.terminal["message"] == f"run cancelled by {sig.name}"


async def test_sigterm_mid_tool_kills_the_tool_group_and_writes_nothing_back(
    nursery: trio.Nursery, workspace: WorkspaceServer, work_dir: Path
) -> None:
    workspace.config = _plan(_WRITE, ScriptedStep(tool="run_shell", args={"command": _SHELL}))
    container = await start_container(
        nursery, workspace.mint_dispatch(), "--work-dir", str(work_dir)
    )
    shell = int(await wait_for_file(work_dir / "shell.pid"))
    sleeper = int(await wait_for_file(work_dir / "sleeper.pid"))
    group = os.getpgid(shell)
    assert group != os.getpgid(container.process.pid)  # the tool has its own group

    run, elapsed = await _signal_and_wait(container, signal.SIGTERM)

    _assert_cancelled(run, signal.SIGTERM)
    assert elapsed < 3.0  # "within 1 s" plus generous slack for a loaded CI machine
    await wait_group_gone(group, [shell, sleeper])
    # The interrupted step is closed as failed, not left running.
    assert [(row.name, row.status, row.error) for row in run.turn.steps] == [
        ("write_file", "succeeded", None),
        ("run_shell", "failed", "cancelled"),
    ]
    # A cancelled run never redeems its upload token, though output/ has a file.
    assert (work_dir / "output" / "partial.md").exists()
    assert workspace.requests("results") == []
    assert workspace.uploads == []


async def test_sigint_cancels_too(
    nursery: trio.Nursery, workspace: WorkspaceServer, work_dir: Path
) -> None:
    workspace.config = _plan(ScriptedStep(tool="run_shell", args={"command": _SHELL}))
    container = await start_container(
        nursery, workspace.mint_dispatch(), "--work-dir", str(work_dir)
    )
    shell = int(await wait_for_file(work_dir / "shell.pid"))
    sleeper = int(await wait_for_file(work_dir / "sleeper.pid"))
    group = os.getpgid(shell)
    run, _ = await _signal_and_wait(container, signal.SIGINT)
    _assert_cancelled(run, signal.SIGINT)
    await wait_group_gone(group, [shell, sleeper])


async def test_sigterm_escalates_to_sigkill_for_a_stubborn_tool(
    nursery: trio.Nursery, workspace: WorkspaceServer, work_dir: Path, test_skills: Path
) -> None:
    workspace.config = _plan(ScriptedStep(tool="stubborn"))
    container = await start_container(
        nursery,
        workspace.mint_dispatch(),
        "--work-dir",
        str(work_dir),
        "--skills-dir",
        str(test_skills),
    )
    stubborn = int(await wait_for_file(work_dir / "stubborn.pid"))
    run, elapsed = await _signal_and_wait(container, signal.SIGTERM)
    _assert_cancelled(run, signal.SIGTERM)
    assert elapsed < 3.0
    await wait_group_gone(stubborn, [stubborn])


async def test_sigterm_during_claude_code_kills_the_cli_group(
    nursery: trio.Nursery, workspace: WorkspaceServer, work_dir: Path
) -> None:
    workspace.config = ConfigResponse(
        agent=ClaudeCodeAgent(command=fake_claude.command(TRANSCRIPTS / "hang.jsonl"))
    )
    container = await start_container(
        nursery, workspace.mint_dispatch(), "--work-dir", str(work_dir)
    )
    cli, grandchild = map(int, (await wait_for_file(work_dir / "claude.pids")).split())
    run, _ = await _signal_and_wait(container, signal.SIGTERM)
    _assert_cancelled(run, signal.SIGTERM)
    await wait_group_gone(cli, [cli, grandchild])
    # The translated tool call that was running is part of the trace.
    assert [row.name for row in run.turn.steps] == ["Bash"]


async def test_sigterm_during_bootstrap(nursery: trio.Nursery, workspace: WorkspaceServer) -> None:
    workspace.hang.add("config")
    container = await start_container(nursery, workspace.mint_dispatch())
    with trio.fail_after(20):
        while not workspace.requests("config"):
            await trio.sleep(0.02)
    run, elapsed = await _signal_and_wait(container, signal.SIGTERM)
    _assert_cancelled(run, signal.SIGTERM)
    assert elapsed < 3.0
    assert len(run.lines) == 1


async def test_sigterm_while_waiting_for_the_dispatch(nursery: trio.Nursery) -> None:
    container = await start_container(nursery, None)
    with trio.fail_after(20):
        while not catches_signal(container.process.pid, signal.SIGTERM):
            await trio.sleep(0.01)
    run, _ = await _signal_and_wait(container, signal.SIGTERM)
    _assert_cancelled(run, signal.SIGTERM)


async def test_runtime_cap_from_the_config(workspace: WorkspaceServer, work_dir: Path) -> None:
    workspace.config = _plan(
        _WRITE, ScriptedStep(tool="run_shell", args={"command": _SHELL}), max_runtime_sec=1.5
    )
    run = await run_container(workspace.mint_dispatch(), "--work-dir", str(work_dir))
    assert run.returncode == 1, run
    assert run.terminal["code"] == "runtime_exceeded"
    assert run.terminal["message"] == "the run exceeded its runtime cap of 1.5s"
    shell = int((work_dir / "shell.pid").read_text())
    sleeper = int((work_dir / "sleeper.pid").read_text())
    await wait_group_gone(shell, [shell, sleeper])
    assert run.turn.steps[-1].error == "cancelled"
    assert workspace.requests("results") == []


async def test_operator_runtime_cap_covers_bootstrap(workspace: WorkspaceServer) -> None:
    workspace.hang.add("env")
    run = await run_container(workspace.mint_dispatch(), "--max-runtime", "0.5")
    assert run.returncode == 1, run
    assert run.terminal["code"] == "runtime_exceeded"
    assert run.terminal["message"] == "the run exceeded its runtime cap of 0.5s"
