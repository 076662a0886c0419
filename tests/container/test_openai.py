"""The openai agent against a scripted OpenAI-compatible server."""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from benchmarks.support.model_server import Hang, HttpError, ModelServer, Raw, reply, tool_calls
from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import (
    Attachment,
    ChatTurn,
    ConfigResponse,
    EnvResponse,
    OpenAIAgent,
)
from tests.support.container import ContainerRun, run_in_process


async def _run(
    workspace: WorkspaceServer,
    server: ModelServer,
    work_dir: Path,
    /,
    *,
    prompt: str = "hello",
    env: dict[str, str] | None = None,
    conversation: list[ChatTurn] | None = None,
    **config: Any,
) -> ContainerRun:
    workspace.env = EnvResponse(vars=env if env is not None else server.env())
    config.setdefault("agent", OpenAIAgent())
    workspace.config = ConfigResponse(**config)
    dispatch = workspace.mint_dispatch(prompt, conversation=conversation)
    return await run_in_process(dispatch, "--work-dir", str(work_dir))


async def test_tool_loop_runs_skills_and_answers(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(
        tool_calls(
            ("write_file", {"path": "output/plan.md", "content": "1. test\n"}),
            ("list_files", {"path": "output"}),
            content="Let me write the plan.",
        ),
        reply("The plan is in output/plan.md."),
    )
    run = await _run(
        workspace,
        model,
        work_dir,
        prompt="Write a plan",
        system_prompt="You are terse.",
        conversation=[
            ChatTurn(role="user", content="earlier question", ts=1),
            ChatTurn(role="assistant", content="earlier answer", ts=2),
        ],
    )
    assert run.returncode == 0, run
    assert run.terminal["message"] == "The plan is in output/plan.md."
    assert [(row.name, row.status) for row in run.turn.steps] == [
        ("write_file", "succeeded"),
        ("list_files", "succeeded"),
    ]
    assert run.steps()[0]["args"] == {"path": "output/plan.md", "content": "1. test\n"}
    assert [u.path for u in workspace.uploads] == ["plan.md"]

    first, second = model.requests
    assert first["model"] == "test-model"
    assert [t["function"]["name"] for t in first["tools"]] == [
        "list_files",
        "read_file",
        "run_shell",
        "write_file",
    ]
    assert first["tool_choice"] == "auto"
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert first["messages"][0]["content"].startswith("You are terse.\n\nYou work in ")
    assert first["messages"][1]["content"] == "earlier question"
    assert first["messages"][3]["content"] == "Write a plan"
    # The second request carries the assistant's tool calls and one tool message each.
    messages = second["messages"]
    assert messages[4]["role"] == "assistant"
    call_ids = [call["id"] for call in messages[4]["tool_calls"]]
    assert [m["tool_call_id"] for m in messages[5:]] == call_ids
    assert json.loads(messages[5]["content"]) == {"path": "output/plan.md", "bytes": 8, "size": 8}
    assert json.loads(messages[6]["content"])["entries"][0]["path"] == "output/plan.md"


async def test_malformed_tool_arguments_are_a_failed_step(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(
        tool_calls(("read_file", '{"path": "a.txt"'), ("read_file", "[1, 2]")),
        reply("Sorry, I garbled that."),
    )
    run = await _run(workspace, model, work_dir)
    assert run.returncode == 0, run
    steps = [s for s in run.steps() if s["status"] != "running"]
    assert [s["status"] for s in steps] == ["failed", "failed"]
    assert steps[0]["error"].startswith("malformed tool arguments (not JSON")
    assert steps[1]["error"] == "malformed tool arguments: expected a JSON object"
    running = [s for s in run.steps() if s["status"] == "running"]
    assert running[0]["args"] == '{"path": "a.txt"'
    # The model is told about it and gets to answer.
    tool_messages = [m for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert json.loads(tool_messages[0]["content"])["error"].startswith("malformed tool arguments")
    assert run.terminal["message"] == "Sorry, I garbled that."


async def test_model_timeout(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(Hang())
    run = await _run(workspace, model, work_dir, agent=OpenAIAgent(request_timeout_sec=0.5))
    assert run.returncode == 1, run
    assert run.terminal["code"] == "model_timeout"
    assert run.terminal["message"] == "model provider timed out after 0.5s"
    assert len(model.requests) == 1
    assert not workspace.requests("results")


async def test_model_timeout_after_a_tool_call(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(tool_calls(("write_file", {"path": "output/a", "content": "a"})), Hang())
    run = await _run(workspace, model, work_dir, agent=OpenAIAgent(request_timeout_sec=0.5))
    assert run.terminal["code"] == "model_timeout"
    assert [row.status for row in run.turn.steps] == ["succeeded"]
    assert not workspace.requests("results")  # a failed run writes nothing back


async def test_model_http_error(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(HttpError(503, '{"error": {"message": "overloaded"}}'))
    run = await _run(workspace, model, work_dir)
    assert run.returncode == 1, run
    assert run.terminal["code"] == "model_error"
    assert run.terminal["message"] == (
        'model provider answered 503: {"error": {"message": "overloaded"}}'
    )


async def test_wrong_api_key_is_model_error(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    env = {**model.env(), "OPENAI_API_KEY": "sk-wrong"}
    run = await _run(workspace, model, work_dir, env=env)
    assert run.terminal["code"] == "model_error"
    assert "answered 401" in run.terminal["message"]
    assert "sk-wrong" not in run.stdout.decode()


async def test_unusable_completion_is_model_error(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(Raw(b"<html>gateway</html>"))
    run = await _run(workspace, model, work_dir)
    assert run.terminal["code"] == "model_error"
    assert run.terminal["message"].startswith("malformed completion from the model provider")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            b'{"choices": [{"message": {"content": "hi"}, "logprobs": '
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}]}",
            "JSON nested too deeply",
        ),
        (b'{"choices": [{"message": {"content": "\xff"}}]}', "invalid UTF-8: byte 0xff"),
    ],
)
async def test_undecodable_completion_is_model_error(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path, body: bytes, needle: str
) -> None:
    model.add(Raw(body))
    run = await _run(workspace, model, work_dir)
    assert run.returncode == 1, run
    assert run.terminal["code"] == "model_error"
    assert run.terminal["message"].startswith("malformed completion from the model provider")
    assert needle in run.terminal["message"]


async def test_deeply_nested_tool_arguments_are_a_failed_step(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(tool_calls(("read_file", "[" * 100_000 + "]" * 100_000)), reply("Sorry."))
    run = await _run(workspace, model, work_dir)
    assert run.returncode == 0, run
    (failed,) = [s for s in run.steps() if s["status"] != "running"]
    assert failed["error"] == "malformed tool arguments (not JSON: JSON nested too deeply)"
    assert run.terminal["message"] == "Sorry."


async def test_no_choices_is_model_error(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add({"choices": []})
    run = await _run(workspace, model, work_dir)
    assert run.terminal["code"] == "model_error"
    assert "without choices" in run.terminal["message"]


async def test_iterations_are_bounded(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(*[tool_calls(("list_files", {})) for _ in range(3)])
    run = await _run(workspace, model, work_dir, agent=OpenAIAgent(max_iterations=2))
    assert run.returncode == 1, run
    assert run.terminal["code"] == "max_iterations"
    assert len(model.requests) == 2
    assert len(run.turn.steps) == 2


async def test_unknown_tool_from_the_model_is_a_failed_step(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(tool_calls(("delete_everything", {})), reply("ok"))
    run = await _run(workspace, model, work_dir, skills=["read_file"])
    assert run.returncode == 0, run
    assert [t["function"]["name"] for t in model.requests[0]["tools"]] == ["read_file"]
    assert run.steps()[-1]["error"] == ("unknown tool 'delete_everything' (available: read_file)")


async def test_model_from_config_and_no_tools(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    model.add(reply(""))
    run = await _run(workspace, model, work_dir, model="gpt-x", skills=[])
    assert run.returncode == 0, run
    assert run.terminal["message"] == ""
    assert model.requests[0]["model"] == "gpt-x"
    assert "tools" not in model.requests[0]


async def test_missing_model_is_bad_config(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    env = {k: v for k, v in model.env().items() if k != "OPENAI_MODEL"}
    run = await _run(workspace, model, work_dir, env=env)
    assert run.terminal["code"] == "bad_config"
    assert model.requests == []


async def test_unreachable_model_is_model_error(workspace: WorkspaceServer, work_dir: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workspace.env = EnvResponse(
        vars={"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_MODEL": "m"}
    )
    workspace.config = ConfigResponse(agent=OpenAIAgent())
    run = await run_in_process(
        workspace.mint_dispatch(),
        "--work-dir",
        str(work_dir),
        "--connect-retries",
        "1",
        "--retry-backoff",
        "0.01",
    )
    assert run.returncode == 1, run
    assert run.terminal["code"] == "model_error"
    assert run.terminal["message"].startswith("model provider unreachable")


async def test_attachments_are_in_the_work_dir_and_named_to_the_model(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    data = b"a,b\n1,2\n"
    workspace.attachments = {"file_1": data}
    attachment = Attachment(
        id="file_1",
        path="attachments/data.csv",
        size=len(data),
        content_type="text/csv",
        sha256=hashlib.sha256(data).hexdigest(),
    )
    model.add(tool_calls(("read_file", {"path": "attachments/data.csv"})), reply("Two columns."))
    run = await _run(workspace, model, work_dir, attachments=[attachment])
    assert run.returncode == 0, run
    assert [(row.name, row.status) for row in run.turn.steps] == [
        ("download_attachments", "succeeded"),
        ("read_file", "succeeded"),
    ]
    assert (work_dir / "attachments" / "data.csv").read_bytes() == data
    first, second = model.requests
    assert first["messages"][0]["content"].endswith(
        "The user attached these files, in the work dir: attachments/data.csv (8 bytes, text/csv)."
    )
    assert "1,2" in second["messages"][-1]["content"]  # the tool read the delivered file
    # The run token downloaded it after /config redeemed it.
    assert [r.route for r in workspace.redemptions][:3] == ["env", "config", "attachments"]


async def test_an_attachment_not_as_announced_fails_the_run(
    workspace: WorkspaceServer, model: ModelServer, work_dir: Path
) -> None:
    workspace.attachments = {"file_1": b"longer than announced"}
    attachment = Attachment(id="file_1", path="attachments/a.txt", size=4)
    run = await _run(workspace, model, work_dir, attachments=[attachment])
    assert run.returncode == 1
    assert run.terminal["code"] == "attachments_failed"
    assert run.terminal["message"] == "attachments/a.txt is longer than its announced 4 bytes"
    [step] = run.turn.steps
    assert (step.name, step.status, step.error) == (
        "download_attachments",
        "failed",
        run.terminal["message"],
    )
    assert not (work_dir / "attachments" / "a.txt").exists()  # the partial file is removed
    assert model.requests == []  # the agent never started
