"""User messages on stdin after the dispatch line (durable sessions' framing)."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from benchmarks.support.model_server import ModelServer, reply, tool_calls
from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import ConfigResponse, EnvResponse, OpenAIAgent
from tests.support.container import run_container, start_container


async def test_pretty_printed_dispatch_on_stdin_still_runs(workspace: WorkspaceServer) -> None:
    dispatch = json.dumps(workspace.mint_dispatch("pretty"), indent=2).encode()
    assert dispatch.count(b"\n") > 3
    run = await run_container(dispatch)
    assert run.returncode == 0, run
    assert run.terminal["message"] == "Done."


async def test_dispatch_line_then_eof_runs_without_messages(workspace: WorkspaceServer) -> None:
    run = await run_container(json.dumps(workspace.mint_dispatch("one line")).encode() + b"\n")
    assert run.returncode == 0, run
    assert not [line for line in run.lines if "user message" in line.get("message", "")]


async def test_message_mid_run_reaches_the_next_model_call(
    nursery: trio.Nursery, workspace: WorkspaceServer, model: ModelServer, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    workspace.env = EnvResponse(vars=model.env())
    workspace.config = ConfigResponse(agent=OpenAIAgent())
    command = f"while [ ! -e {gate} ]; do sleep 0.01; done; echo opened"
    model.add(tool_calls(("run_shell", {"command": command})), reply("Thanks for the note."))
    container = await start_container(nursery, None, "--work-dir", str(tmp_path / "work"))
    stdin = container.process.stdin
    assert stdin is not None
    await stdin.send_all(json.dumps(workspace.mint_dispatch("start")).encode() + b"\n")
    with trio.fail_after(30):
        while not model.requests:
            await trio.sleep(0.01)
    await stdin.send_all(b'{"type": "message", "text": "also add tests"}\n')
    await stdin.send_all(b"not a message\n")
    await stdin.send_all(b'{"type": "message", "text": "and docs"}\n')
    await stdin.aclose()
    gate.write_text("go")  # the tool ends after the messages were written to stdin
    run = await container.wait()
    assert run.returncode == 0, run
    assert run.terminal["message"] == "Thanks for the note."
    first, second = model.requests
    assert [m["content"] for m in first["messages"] if m["role"] == "user"] == ["start"]
    users = [m["content"] for m in second["messages"] if m["role"] == "user"]
    assert users == ["start", "also add tests", "and docs"]
    assert second["messages"][-2:] == [
        {"role": "user", "content": "also add tests"},
        {"role": "user", "content": "and docs"},
    ]
    logs = run.logs
    assert "user message: also add tests" in logs
    assert any(log.startswith("stdin line 3: not a message") for log in logs), logs
