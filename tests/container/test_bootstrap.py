"""Bootstrap: redeeming the one-time tokens against a real workspace server."""

from __future__ import annotations

import socket
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
from tests.support.container import run_container, run_in_process

_FAST = ("--callback-retry", "0.1", "--retry-backoff", "0.01")


def _assert_no_agent_ran(run_lines: list[dict[str, object]]) -> None:
    assert not [line for line in run_lines if line["type"] == "step"]


async def test_wrong_token_is_unauthorized(workspace: WorkspaceServer) -> None:
    dispatch = workspace.mint_dispatch()
    dispatch["otp_setup"] = "otp_setup_not-a-real-token"
    run = await run_container(dispatch)
    assert run.returncode == 1, run
    assert run.terminal["code"] == "unauthorized"
    assert "env token" in run.terminal["message"]
    assert dispatch["otp_setup"] not in run.stdout.decode()
    assert workspace.requests("env")[0].reason == "unknown token"
    assert not workspace.requests("config")
    assert len(run.lines) == 1


async def test_expired_token_is_unauthorized(workspace: WorkspaceServer) -> None:
    dispatch = workspace.mint_dispatch(ttl={"run": 0})
    run = await run_in_process(dispatch)
    assert run.returncode == 1, run
    assert run.terminal["code"] == "unauthorized"
    assert "config token" in run.terminal["message"]
    assert workspace.requests("config")[0].reason == "token expired"
    assert not workspace.requests("results")


async def test_replayed_tokens_are_unauthorized(workspace: WorkspaceServer) -> None:
    dispatch = workspace.mint_dispatch()
    first = await run_in_process(dispatch)
    assert first.returncode == 0, first
    second = await run_in_process(dispatch)
    assert second.returncode == 1, second
    assert second.terminal["code"] == "unauthorized"
    assert workspace.requests("env")[-1].reason == "token already used"


async def test_token_for_another_route_is_unauthorized(workspace: WorkspaceServer) -> None:
    dispatch = workspace.mint_dispatch()
    dispatch["otp_setup"], dispatch["otp_run"] = dispatch["otp_run"], dispatch["otp_setup"]
    run = await run_in_process(dispatch)
    assert run.terminal["code"] == "unauthorized"
    assert workspace.requests("env")[0].reason == "token is for run, not setup"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unreachable_workspace_is_bootstrap_failed() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/api/sandbox/s"
    dispatch = {"agent_url": url, "otp_setup": "a", "otp_run": "b", "prompt": "p"}
    run = await run_container(dispatch, *_FAST)
    assert run.returncode == 1, run
    assert run.terminal["code"] == "bootstrap_failed"
    assert "unreachable" in run.terminal["message"]
    assert len(run.lines) == 1


@pytest.mark.parametrize("route", ["env", "config"])
async def test_workspace_server_error_is_bootstrap_failed(
    workspace: WorkspaceServer, route: str
) -> None:
    workspace.status[route] = 500
    run = await run_in_process(workspace.mint_dispatch(), *_FAST)
    assert run.returncode == 1, run
    assert run.terminal["code"] == "bootstrap_failed"
    assert f"GET /{route} answered 500" in run.terminal["message"]
    assert len(workspace.requests(route)) == 1  # a redeemed token is never retried


async def test_hanging_workspace_is_retried_with_the_same_key_then_times_out(
    workspace: WorkspaceServer,
) -> None:
    workspace.hang.add("config")
    with trio.fail_after(20):
        run = await run_in_process(
            workspace.mint_dispatch(), "--http-timeout", "0.5", "--callback-retry", "4"
        )
    assert run.terminal["code"] == "bootstrap_failed"
    assert "timed out" in run.terminal["message"]
    attempts = workspace.requests("config")
    assert len(attempts) >= 2
    # Each attempt redeemed the run token again: they all carried the first one's key.
    assert all(attempt.reason is None for attempt in attempts), attempts


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{not json", "invalid /config response"),
        (b'{"agent": {"kind": "gpt-pilot"}}', "invalid /config response"),
        (b'{"agent": {"kind": "scripted"}, "max_runtime_sec": -1}', "max_runtime_sec"),
        (b'{"agent": {"kind": "scripted", "steps": [{"args": {}}]}}', "tool"),
        (b'{"agent": {"kind": "scripted"}, "prompt": "caf\xe9"}', "invalid UTF-8: byte 0xe9"),
        (
            b'{"agent": {"kind": "scripted"}, "later": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "JSON nested too deeply",
        ),
    ],
)
async def test_malformed_config_is_bootstrap_failed(
    workspace: WorkspaceServer, body: bytes, needle: str
) -> None:
    workspace.config = body
    run = await run_in_process(workspace.mint_dispatch())
    assert run.returncode == 1, run
    assert run.terminal["code"] == "bootstrap_failed"
    assert needle in run.terminal["message"]


async def test_malformed_env_is_bootstrap_failed(workspace: WorkspaceServer) -> None:
    workspace.env = b'{"vars": {"A": 1}}'
    run = await run_in_process(workspace.mint_dispatch())
    assert run.terminal["code"] == "bootstrap_failed"
    assert "invalid /env response" in run.terminal["message"]
    assert not workspace.requests("config")


async def test_config_prompt_and_conversation_override_the_dispatch(
    workspace: WorkspaceServer,
) -> None:
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(message="answering {prompt}"), prompt="the config's prompt"
    )
    run = await run_in_process(workspace.mint_dispatch("the dispatch's prompt"))
    assert run.terminal["message"] == "answering the config's prompt"


async def test_bootstrap_logs_no_secrets(workspace: WorkspaceServer, work_dir: Path) -> None:
    workspace.env = EnvResponse(vars={"API_TOKEN": "s3cr3t-value"})
    workspace.config = ConfigResponse(agent=ScriptedAgent(steps=[ScriptedStep(tool="list_files")]))
    dispatch = workspace.mint_dispatch()
    run = await run_in_process(dispatch, "--work-dir", str(work_dir))
    assert run.returncode == 0, run
    text = run.stdout.decode()
    assert "s3cr3t-value" not in text
    for key in ("otp_setup", "otp_run", "otp_upload"):
        assert dispatch[key] not in text
    assert "bootstrap: 1 env var(s), agent scripted" in run.logs
