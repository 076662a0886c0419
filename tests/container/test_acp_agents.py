"""The acp agent kind running a real agent (opencode, from npm) in the container, against
the stand-in model server on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from benchmarks.support.model_server import ModelScript, ModelServer, start_model_server
from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import AcpAgent, ConfigResponse
from tests.support.container import run_in_process, start_container

OPENCODE = "opencode-ai@1.18.33"
_PREFIX = Path.home() / ".cache" / "sandstream" / "test-agents" / "opencode-1.18.33"


@pytest.fixture(scope="session")
def opencode() -> Path:
    """The opencode binary, installed from npm into a cache dir on first use."""
    binary = _PREFIX / "node_modules" / ".bin" / "opencode"
    if not binary.exists():
        subprocess.run(
            ["npm", "install", "--prefix", str(_PREFIX), OPENCODE, "--no-audit", "--no-fund"],
            check=True,
            capture_output=True,
        )
    return binary


@pytest.fixture
async def model(nursery: trio.Nursery) -> ModelServer:
    return await start_model_server(nursery, ModelScript(command="ls"))


def _agent(opencode: Path, model: ModelServer, home: Path, *, ask: bool) -> AcpAgent:
    home.mkdir(exist_ok=True)
    config: dict[str, Any] = {
        "provider": {
            "standin": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Stand-in",
                "options": {"baseURL": model.url + "/v1", "apiKey": "sk-test"},
                "models": {"stand-in": {"name": "stand-in"}},
            }
        },
        "model": "standin/stand-in",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"bash": "ask" if ask else "allow"},
    }
    (home / "opencode.json").write_text(json.dumps(config))
    env = {
        "OPENCODE_CONFIG": str(home / "opencode.json"),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    }
    for name, sub in [("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"),
                      ("XDG_CACHE_HOME", "cache"), ("XDG_STATE_HOME", "state")]:  # fmt: skip
        env[name] = str(home / sub)
    return AcpAgent(command=[str(opencode), "acp"], env=env, stall_timeout_sec=60)


async def test_a_turn_gives_the_step_and_the_message(
    workspace: WorkspaceServer, model: ModelServer, opencode: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("hello")
    workspace.config = ConfigResponse(agent=_agent(opencode, model, tmp_path / "h", ask=False))
    run = await run_in_process(
        workspace.mint_dispatch("List the files"), "--work-dir", str(work), timeout=120
    )
    assert run.returncode == 0, run
    assert run.terminal["type"] == "result"
    assert run.terminal["message"] == "The command ran fine."
    steps = run.steps()
    assert steps[-1]["status"] == "succeeded" and steps[-1]["name"] == "execute"
    assert steps[-1]["args"]["command"] == "ls"
    assert "a.txt" in steps[-1]["result"]
    assert not any(line["type"] in ("delta", "permission") for line in run.lines)


async def _live_turn(
    nursery: trio.Nursery, workspace: WorkspaceServer, work: Path
) -> tuple[Any, list[dict[str, Any]]]:
    dispatch = workspace.mint_dispatch("List the files")
    dispatch["extensions"] = ["live"]
    container = await start_container(nursery, None, "--work-dir", str(work))
    assert container.process.stdin is not None
    await container.process.stdin.send_all(json.dumps(dispatch).encode() + b"\n")
    return container, []


def _lines(stdout: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


async def _wait_for(container: Any, kind: str, status: str) -> dict[str, Any]:
    with trio.fail_after(90):
        while True:
            for line in _lines(container.stdout):
                if line["type"] == kind and line.get("status") == status:
                    return line
            await trio.sleep(0.05)


@pytest.mark.parametrize(("reply", "step_status"), [("once", "succeeded"), ("reject", "failed")])
async def test_a_permission_is_answered_through_stdin(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    model: ModelServer,
    opencode: Path,
    tmp_path: Path,
    reply: str,
    step_status: str,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    workspace.config = ConfigResponse(agent=_agent(opencode, model, tmp_path / "h", ask=True))
    container, _ = await _live_turn(nursery, workspace, work)
    pending = await _wait_for(container, "permission", "pending")
    assert {o["kind"] for o in pending["options"]} >= {"allow_once", "reject_once"}
    assert container.process.stdin is not None
    answer = {"type": "permission", "id": pending["id"], "reply": reply}
    await container.process.stdin.send_all(json.dumps(answer).encode() + b"\n")
    await _wait_for(container, "permission", "resolved")
    await container.process.stdin.aclose()
    with trio.fail_after(90):
        await container.process.wait()
    lines = _lines(container.stdout)
    resolved = [x for x in lines if x["type"] == "permission" and x["status"] == "resolved"]
    assert resolved == [{"type": "permission", "id": pending["id"], "status": "resolved",
                         "reply": reply, "ts": resolved[0]["ts"]}]  # fmt: skip
    steps = [x for x in lines if x["type"] == "step"]
    assert pending["step"] == steps[0]["id"]
    assert steps[-1]["status"] == step_status
    terminal = lines[-1]
    assert terminal["type"] == "result", lines[-3:]
    deltas = [x for x in lines if x["type"] == "delta" and x["kind"] == "text"]
    assert "".join(d["text"] for d in deltas) == terminal["message"]
    if reply == "once":  # a rejected command ends opencode's turn without more text
        assert terminal["message"] == "The command ran fine."
    assert all(lines.index(d) < len(lines) - 1 for d in deltas)


async def test_cancel_mid_tool_leaves_no_process(
    nursery: trio.Nursery, workspace: WorkspaceServer, opencode: Path, tmp_path: Path
) -> None:
    model = await start_model_server(nursery, ModelScript(command="sleep 300"))
    work = tmp_path / "work"
    work.mkdir()
    workspace.config = ConfigResponse(agent=_agent(opencode, model, tmp_path / "h", ask=False))
    container, _ = await _live_turn(nursery, workspace, work)
    await _wait_for(container, "step", "running")
    with trio.fail_after(60):
        while not _sleepers():
            await trio.sleep(0.05)
    container.send_signal(signal.SIGTERM)
    with trio.fail_after(30):
        await container.process.wait()
    lines = _lines(container.stdout)
    assert lines[-1]["type"] == "error" and lines[-1]["code"] == "cancelled", lines[-3:]
    assert _sleepers() == []


def _sleepers() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.split(b"\0")[:2] == [b"sleep", b"300"] and os.getpid() != int(entry.name):
                found.append(int(entry.name))
    return found
