"""The claude-code agent, against a fake ``claude`` replaying recorded transcripts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import (
    Attachment,
    ChatTurn,
    ClaudeCodeAgent,
    ConfigResponse,
    EnvResponse,
    McpServer,
)
from tests.support import TRANSCRIPTS, fake_claude
from tests.support.container import ContainerRun, run_in_process

RECORDED = Path(__file__).resolve().parent.parent / "data" / "claude_code"
"""Excerpts of real Claude Code recordings (sources in their README.md)."""


async def _run(
    workspace: WorkspaceServer,
    work_dir: Path,
    transcript: str,
    record: Path | None = None,
    conversation: list[ChatTurn] | None = None,
    folder: Path = TRANSCRIPTS,
    **config: Any,
) -> ContainerRun:
    command = fake_claude.command(folder / transcript, record)
    workspace.env = EnvResponse(vars={"ANTHROPIC_API_KEY": "sk-ant-test"})
    workspace.config = ConfigResponse(agent=ClaudeCodeAgent(command=command), **config)
    dispatch = workspace.mint_dispatch("Summarize the project", conversation=conversation)
    return await run_in_process(dispatch, "--work-dir", str(work_dir))


async def test_transcript_becomes_steps_and_result(
    workspace: WorkspaceServer, work_dir: Path, tmp_path: Path
) -> None:
    record = tmp_path / "claude.json"
    run = await _run(
        workspace,
        work_dir,
        "success.jsonl",
        record,
        model="claude-sonnet-4-5",
        system_prompt="Be brief.",
        conversation=[
            ChatTurn(role="user", content="hi"),
            ChatTurn(role="assistant", content="hello"),
        ],
    )
    assert run.returncode == 0, run
    assert run.terminal["message"] == (
        "The project has a README and a src folder; the summary is in output/summary.md."
    )
    assert [(row.id, row.name, row.status) for row in run.turn.steps] == [
        ("toolu_01Bash", "Bash", "succeeded"),
        ("toolu_02Write", "Write", "succeeded"),
    ]
    assert "I'll look at the project layout first." in run.logs
    # The file the CLI wrote into output/ is written back.
    assert [(u.path, u.content[:9]) for u in workspace.uploads] == [("summary.md", b"# Summary")]

    recorded = json.loads(record.read_text())
    assert recorded["argv"][-8:] == [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "claude-sonnet-4-5",
        "--system-prompt",
        "Be brief.",
    ]
    assert recorded["rest"] == ["--model", "claude-sonnet-4-5", "--system-prompt", "Be brief."]
    assert recorded["cwd"] == str(work_dir.resolve())
    assert recorded["env"]["ANTHROPIC_API_KEY"] == "sk-ant-test"
    assert recorded["env"]["SANDSTREAM_OUTPUT_DIR"] == str(work_dir.resolve() / "output")
    assert recorded["prompt"] == (
        "Earlier in this conversation:\n\n[user]\nhi\n\n[assistant]\nhello\n\n"
        "[user]\nSummarize the project"
    )


async def test_failed_tool_in_transcript(workspace: WorkspaceServer, work_dir: Path) -> None:
    run = await _run(workspace, work_dir, "tool_error.jsonl")
    assert run.returncode == 0, run
    (row,) = run.turn.steps
    assert row.status == "failed"
    assert row.error == "<tool_use_error>File does not exist.</tool_use_error>"
    assert run.terminal["message"] == "There is no missing.txt in the project."


async def test_error_result_is_the_terminal_error(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run(workspace, work_dir, "error_max_turns.jsonl")
    assert run.returncode == 1, run
    assert run.terminal["code"] == "max_turns"
    assert run.terminal["message"] == "Claude Code reached its maximum number of turns (2)"
    assert not workspace.requests("results")


async def test_cli_dying_without_result_is_agent_failed(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run(workspace, work_dir, "no_result.jsonl")
    assert run.returncode == 1, run
    assert run.terminal["code"] == "agent_failed"
    assert run.terminal["message"].startswith(
        f"{sys.executable} exited with status 1 without a result: API Error: 529"
    )


async def test_garbage_lines_are_warnings(workspace: WorkspaceServer, work_dir: Path) -> None:
    run = await _run(workspace, work_dir, "garbage.jsonl")
    assert run.returncode == 0, run
    warnings = [line["message"] for line in run.lines if line.get("level") == "warn"]
    assert len(warnings) == 2
    assert "not JSON" in warnings[0]
    assert run.terminal["message"] == "All good."


async def test_missing_cli_is_agent_failed(workspace: WorkspaceServer, work_dir: Path) -> None:
    workspace.config = ConfigResponse(agent=ClaudeCodeAgent(command=["/nonexistent/claude"]))
    run = await run_in_process(workspace.mint_dispatch(), "--work-dir", str(work_dir))
    assert run.returncode == 1, run
    assert run.terminal["code"] == "agent_failed"
    assert run.terminal["message"].startswith("cannot start /nonexistent/claude")


async def test_mcp_servers_are_passed_as_mcp_config(
    workspace: WorkspaceServer, work_dir: Path, tmp_path: Path
) -> None:
    record = tmp_path / "claude.json"
    run = await _run(
        workspace,
        work_dir,
        "tool_error.jsonl",
        record,
        mcp_servers=[
            McpServer(name="files", command=["mcp-files", "--root", "."], env={"A": "1"}),
            McpServer(name="search", url="http://127.0.0.1:9/mcp"),
        ],
    )
    assert run.returncode == 0, run
    rest = json.loads(record.read_text())["rest"]
    assert rest[0] == "--mcp-config"
    # The config file lives in the container's private state dir, removed after the run.
    assert not Path(rest[1]).exists()


def _levels(run: ContainerRun, level: str) -> list[str]:
    return [line["message"] for line in run.lines if line.get("level") == level]


async def test_recorded_permission_denial_is_a_marked_failed_step(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run(workspace, work_dir, "dots_permission_denied_2.1.228.jsonl", folder=RECORDED)
    assert run.returncode == 0, run
    (row,) = run.turn.steps
    assert (row.name, row.status) == ("Write", "failed")
    assert row.error == "permission denied (permission-rule): denied by the spike driver"
    assert not [m for m in _levels(run, "warn") if "unrecognized" in m]
    assert any(
        m.startswith("claude-code rate limit: status=allowed") for m in _levels(run, "debug")
    )
    assert any(m.startswith("claude-code system hook_response:") for m in _levels(run, "debug"))
    assert run.terminal["type"] == "result"


async def test_recorded_interrupted_turn_hides_the_internal_diagnostic(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run(workspace, work_dir, "dots_interrupted_2.1.228.jsonl", folder=RECORDED)
    assert run.returncode == 1, run
    assert run.terminal["code"] == "agent_error"
    assert run.terminal["message"] == "Claude Code stopped before finishing (aborted_tools)"
    assert "[ede_diagnostic]" not in run.terminal["message"]
    assert [row.status for row in run.turn.steps] == ["failed"]


async def test_recorded_authentication_failure_is_its_own_error_code(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run(workspace, work_dir, "relay_authentication_failed.jsonl", folder=RECORDED)
    assert run.returncode == 1, run
    assert run.terminal["code"] == "authentication_failed"
    assert run.terminal["message"] == "Failed to authenticate. API Error: 401 API key is invalid."
    # The CLI's synthetic message is a warning, not something the agent said.
    assert "Failed to authenticate. API Error: 401 API key is invalid." not in _levels(run, "info")


async def test_the_cli_is_told_where_the_attachments_are(
    workspace: WorkspaceServer, work_dir: Path, tmp_path: Path
) -> None:
    record = tmp_path / "claude.json"
    workspace.attachments = {"file_1": b"# spec\n"}
    attachment = Attachment(id="file_1", path="attachments/spec.md", size=7)
    run = await _run(workspace, work_dir, "success.jsonl", record, attachments=[attachment])
    assert run.returncode == 0, run
    assert run.turn.steps[0].name == "download_attachments"
    recorded = json.loads(record.read_text())
    assert recorded["prompt"] == (
        "Summarize the project\n\nThe user attached these files, in the work dir: "
        "attachments/spec.md (7 bytes, application/octet-stream)."
    )
    assert (Path(recorded["cwd"]) / "attachments" / "spec.md").read_bytes() == b"# spec\n"


async def test_a_tool_result_of_several_mib_is_a_succeeded_step_with_a_cut_result(
    workspace: WorkspaceServer, work_dir: Path, tmp_path: Path
) -> None:
    """The tool's output (3 MiB) is over the line bound: its step still succeeds, with a
    result cut and marked, and the run goes on to its answer."""
    big = "x" * (3 * 1024 * 1024)
    lines = (TRANSCRIPTS / "success.jsonl").read_text().splitlines()
    for number, line in enumerate(lines):
        entry = json.loads(line)
        content = entry.get("message", {}).get("content", [])
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result" and block.get("tool_use_id") == "toolu_01Bash":
                block["content"] = big
                block["is_error"] = False  # after the content, as Claude Code writes it
                lines[number] = json.dumps(entry)
    transcript = tmp_path / "big.jsonl"
    transcript.write_text("\n".join(lines) + "\n")
    run = await _run(workspace, work_dir, transcript.name, folder=tmp_path)
    assert run.returncode == 0, run
    bash = next(row for row in run.turn.steps if row.id == "toolu_01Bash")
    assert bash.status == "succeeded"
    assert bash.result is not None
    result = bytes(bash.result).decode()  # the raw JSON the step line carried
    assert "truncated" in result and len(result) < 1024 * 1024
    assert run.terminal["type"] == "result"
