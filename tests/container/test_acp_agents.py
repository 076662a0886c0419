"""The acp agent kind running the five real agents (installed by ``sandstream agents
install``) in the container, against the stand-in model server on loopback.

Each agent runs its own shell tool on the stand-in's script. Claude Code, OpenCode
(``permission.bash = "ask"``) and Gemini CLI ask before running it; Codex (in
``full-access`` mode) and pi do not.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from pathlib import Path
from typing import Any, Final

import psutil
import pytest
import trio

from benchmarks.support.model_server import ModelScript, start_model_server
from benchmarks.support.workspace import WorkspaceServer
from sandstream.container.agents.acp.session import SESSION_STEP
from sandstream.core.schemas import AcpPreset, ConfigResponse
from tests.support.agents import ASKING, PRESETS, WRITE, acp_spec
from tests.support.container import RunningContainer, run_in_process, start_container

TEXT: Final = ("The command ", "ran ", "fine.")
DEADLINE: Final = 120.0


def _lines(stdout: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


async def _start_live(
    nursery: trio.Nursery, workspace: WorkspaceServer, work: Path
) -> RunningContainer:
    """A container with a ``live`` dispatch on its stdin, stdin left open for answers."""
    dispatch = workspace.mint_dispatch("Run the command")
    dispatch["extensions"] = ["live"]
    container = await start_container(nursery, None, "--work-dir", str(work))
    assert container.process.stdin is not None
    await container.process.stdin.send_all(json.dumps(dispatch).encode() + b"\n")
    return container


async def _wait_for(container: RunningContainer, kind: str, status: str) -> dict[str, Any]:
    with trio.fail_after(DEADLINE):
        while True:
            for line in _lines(container.stdout):
                if line["type"] == kind and line.get("status") == status:
                    return line
            if container.process.returncode is not None:
                raise AssertionError(f"exited before a {kind} {status}: {container.stdout!r}")
            await trio.sleep(0.05)


async def _answer(container: RunningContainer, request: str, reply: str) -> None:
    assert container.process.stdin is not None
    answer = {"type": "permission", "id": request, "reply": reply}
    await container.process.stdin.send_all(json.dumps(answer).encode() + b"\n")


async def _allow_every_request(container: RunningContainer) -> None:
    """Answer ``once`` to each permission request as it comes (until cancelled)."""
    answered: set[str] = set()
    while True:
        for line in _lines(container.stdout):
            if line["type"] == "permission" and line["id"] not in answered:
                answered.add(line["id"])
                await _answer(container, line["id"], "once")
        await trio.sleep(0.05)


async def _finish(container: RunningContainer) -> list[dict[str, Any]]:
    assert container.process.stdin is not None
    await container.process.stdin.aclose()
    run = await container.wait(DEADLINE)
    return run.lines


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.mark.parametrize("preset", PRESETS)
async def test_a_live_turn_streams_text_and_runs_the_tool(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path, preset: AcpPreset
) -> None:
    model = await start_model_server(nursery, ModelScript(command=WRITE, text=TEXT))
    workspace.config = ConfigResponse(agent=acp_spec(preset, model))
    work = _work(tmp_path)
    container = await _start_live(nursery, workspace, work)
    if preset in ASKING:
        pending = await _wait_for(container, "permission", "pending")
        assert {o["kind"] for o in pending["options"]} >= {"allow_once", "reject_once"}
        await _answer(container, pending["id"], "once")
    lines = await _finish(container)
    terminal = lines[-1]
    assert terminal["type"] == "result", lines[-5:]
    assert terminal["message"].endswith("".join(TEXT))
    texts = [line for line in lines if line["type"] == "delta" and line["kind"] == "text"]
    assert "".join(d["text"] for d in texts) == terminal["message"]
    assert texts and lines.index(texts[0]) < len(lines) - 1
    session, *steps = [line for line in lines if line["type"] == "step"]
    assert (session["name"], session["args"]) == (SESSION_STEP, {"ways": ["session/new"]})
    opened = [s for s in steps if s["id"] == session["id"]]
    assert [(s["status"], s["result"]) for s in opened] == [
        ("succeeded", {"way": "session/new", "continued": False})
    ]
    steps = [s for s in steps if s["id"] != session["id"]]
    ended = [s for s in steps if s["status"] != "running"]
    assert ended and ended[-1]["status"] == "succeeded", steps
    first = steps[0]
    assert first["status"] == "running" and first["name"]
    if preset in ASKING:
        assert pending["step"] == first["id"]
        resolved = [x for x in lines if x["type"] == "permission" and x["status"] == "resolved"]
        assert [(x["id"], x["reply"]) for x in resolved] == [(pending["id"], "once")]
    assert (work / "out.txt").read_text() == "hello-from-tool\n"
    assert any("hello-from-tool" in result for result in model.tool_results())


@pytest.mark.parametrize("preset", PRESETS)
async def test_a_strict_turn_has_no_live_lines(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path, preset: AcpPreset
) -> None:
    """Without the extension nobody can be asked: a request is rejected, and the turn
    still ends with the model's answer."""
    model = await start_model_server(nursery, ModelScript(command=WRITE, text=TEXT))
    workspace.config = ConfigResponse(agent=acp_spec(preset, model))
    run = await run_in_process(
        workspace.mint_dispatch("Run the command"),
        "--work-dir",
        str(_work(tmp_path)),
        timeout=DEADLINE,
    )
    assert run.terminal["type"] == "result", run
    assert not any(line["type"] in ("delta", "permission") for line in run.lines)
    steps = run.steps()
    assert steps and steps[-1]["status"] == ("failed" if preset in ASKING else "succeeded")
    if preset not in ASKING:  # a rejected command may end the agent's turn without text
        assert run.terminal["message"].endswith("".join(TEXT))


@pytest.mark.parametrize(
    ("preset", "reply"), [(p, r) for p in ASKING for r in ("always", "reject")]
)
async def test_a_permission_answered_always_or_reject(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    tmp_path: Path,
    preset: AcpPreset,
    reply: str,
) -> None:
    model = await start_model_server(nursery, ModelScript(command=WRITE, text=TEXT))
    workspace.config = ConfigResponse(agent=acp_spec(preset, model))
    work = _work(tmp_path)
    container = await _start_live(nursery, workspace, work)
    pending = await _wait_for(container, "permission", "pending")
    await _answer(container, pending["id"], reply)
    lines = await _finish(container)
    assert lines[-1]["type"] == "result", lines[-5:]
    resolved = [x for x in lines if x["type"] == "permission" and x["status"] == "resolved"]
    assert [(x["id"], x["reply"]) for x in resolved] == [(pending["id"], reply)]
    step = [s for s in lines if s["type"] == "step" and s["id"] == pending["step"]]
    assert step[-1]["status"] == ("succeeded" if reply == "always" else "failed")
    assert (work / "out.txt").exists() == (reply == "always")


@pytest.mark.parametrize("preset", PRESETS)
async def test_cancel_mid_tool_leaves_no_process(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path, preset: AcpPreset
) -> None:
    marker = _own_sleep()
    model = await start_model_server(nursery, ModelScript(command=marker))
    workspace.config = ConfigResponse(agent=acp_spec(preset, model))
    container = await _start_live(nursery, workspace, _work(tmp_path))
    nursery.start_soon(_allow_every_request, container)
    with trio.fail_after(DEADLINE):
        while not _processes(marker):
            await trio.sleep(0.05)
    container.send_signal(signal.SIGTERM)
    lines = await _finish(container)
    assert lines[-1]["type"] == "error" and lines[-1]["code"] == "cancelled", lines[-3:]
    assert _processes(marker) == []


async def test_an_agent_killed_mid_turn_is_an_error_with_its_stderr(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    marker = _own_sleep()
    model = await start_model_server(nursery, ModelScript(command=marker))
    workspace.config = ConfigResponse(agent=acp_spec("opencode", model))
    container = await _start_live(nursery, workspace, _work(tmp_path))
    nursery.start_soon(_allow_every_request, container)
    with trio.fail_after(DEADLINE):
        while not _processes(marker):
            await trio.sleep(0.05)
    descendants = psutil.Process(container.process.pid).children(recursive=True)
    agents = [p for p in descendants if "opencode" in " ".join(_cmdline(p))]
    assert agents
    for agent in agents:
        agent.send_signal(signal.SIGKILL)
    lines = await _finish(container)
    assert lines[-1]["type"] == "error", lines[-3:]
    assert lines[-1]["code"] == "agent_exited"
    assert lines[-1]["message"].startswith("opencode was killed by SIGKILL before the turn ended")
    assert _processes(marker) == []


@pytest.mark.parametrize(
    ("preset", "failure"),
    [("claude", "status-500"), ("codex", "drop"), ("gemini", "drop"), ("opencode", "status-500")],
)
async def test_a_failing_model_server_is_an_error_not_a_hang(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    tmp_path: Path,
    preset: AcpPreset,
    failure: Any,
) -> None:
    """The agent's own error, or, while it retries silently, the stall timeout's.

    (pi-acp ends a turn whose model calls failed as a normal end of turn: docs/agents.md.)
    """
    model = await start_model_server(nursery, ModelScript(failure=failure))
    workspace.config = ConfigResponse(agent=acp_spec(preset, model, stall_timeout_sec=15))
    run = await run_in_process(
        workspace.mint_dispatch("Hello"), "--work-dir", str(_work(tmp_path)), timeout=DEADLINE
    )
    assert run.terminal["type"] == "error", run
    assert run.terminal["code"] in ("agent_error", "agent_stalled"), run.terminal
    assert model.generations(), "the agent never reached the model"


def _own_sleep() -> str:
    """A shell command only this test runs, found by its argv (other test runs on the
    machine run their own)."""
    return f"sleep {secrets.randbelow(900_000) + 100_000}"


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # gone meanwhile
        return []


def _processes(needle: str) -> list[int]:
    """Pids of this machine's processes whose command line contains ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if needle.encode() in cmdline:
                found.append(int(entry.name))
    return found
