"""POST /stream end to end: real Hypercorn, real httpx, real containers."""

from __future__ import annotations

import logging
import sys

import msgspec
import pytest
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import HEAP_TUNABLES, ScriptedError, ScriptedStep
from sandstream.server import LocalSubprocessLauncher
from sandstream.server.runner.huge_pages import heap_env
from tests.server.harness import (
    RunnerServer,
    load,
    parse_stream,
    scripted,
    shell,
    start_runner,
)

PROBLEM = "application/problem+json"


async def test_a_turn_streams_the_containers_envelope(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    workspace.config = scripted(
        ScriptedStep(tool="write_file", args={"path": "output/a.txt", "content": "hi"}),
        shell("echo from-the-shell"),
        message="You said: {prompt}",
    )
    async with server.client() as client:
        response = await client.post("/stream", json=workspace.mint_dispatch("ping"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    turn_id = response.headers["x-turn-id"]
    lines = parse_stream(response.content)
    assert lines[-1]["type"] == "result"
    assert lines[-1]["message"] == "You said: ping"
    steps = [line for line in lines if line["type"] == "step"]
    assert [(s["name"], s["status"]) for s in steps] == [
        ("write_file", "running"),
        ("write_file", "succeeded"),
        ("run_shell", "running"),
        ("run_shell", "succeeded"),
    ]
    assert steps[3]["result"]["stdout"] == "from-the-shell\n"
    assert [u.path for u in workspace.uploads] == ["a.txt"]

    (record,) = await server.wait_records(1)
    assert record.turn_id == turn_id
    assert record.outcome == "result"
    assert record.terminal == "result"
    assert record.lines == len(lines)
    assert record.bytes == len(response.content)
    assert record.returncode == 0
    assert record.teardown_ms is None  # it exited on its own
    assert server.runner.live == 0


async def test_a_container_error_is_the_terminal_line(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    workspace.config = scripted(error=ScriptedError(code="model_timeout", message="too slow"))
    async with server.client() as client:
        response = await client.post("/stream", json=workspace.mint_dispatch())
    lines = parse_stream(response.content)
    assert lines[-1] == {**lines[-1], "type": "error", "code": "model_timeout"}
    (record,) = await server.wait_records(1)
    assert (record.outcome, record.terminal) == ("error", "model_timeout")


async def test_a_refused_token_at_the_workspace_is_the_containers_error(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    dispatch = workspace.mint_dispatch()
    workspace.tokens.expire(dispatch["otp_setup"])
    async with server.client() as client:
        response = await client.post("/stream", json=dispatch)
    assert response.status_code == 200
    lines = parse_stream(response.content)
    assert lines[-1]["type"] == "error"
    assert lines[-1]["code"] == "unauthorized"


async def test_lines_read_together_go_out_in_one_write(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    workspace.config = load(20_000, payload_bytes=100)
    async with server.client() as client:
        response = await client.post("/stream", json=workspace.mint_dispatch())
    lines = parse_stream(response.content)
    assert len(lines) > 20_000
    (record,) = await server.wait_records(1)
    # Far fewer writes than lines: whatever one read returned went out as one chunk.
    assert record.writes < record.lines / 10, record


async def test_missing_or_wrong_token_is_401_problem_json(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    dispatch = workspace.mint_dispatch()
    async with server.client(auth=False) as client:
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token"},
            {"Authorization": "Basic dGVzdDp0ZXN0"},
            {"Authorization": "Bearer"},
            {"Authorization": "Bearer test-runner-token-and-more"},
        ):
            response = await client.post("/stream", json=dispatch, headers=headers)
            assert response.status_code == 401, headers
            assert response.headers["content-type"] == PROBLEM
            assert response.headers["www-authenticate"].startswith("Bearer")
            # Refused before its body was read: the connection is not reused.
            assert response.headers["connection"] == "close"
            body = response.json()
            assert body["status"] == 401
            assert body["type"] == "urn:sandstream:problem:unauthorized"
            assert body["title"] == "Unauthorized"
        # The scheme is case-insensitive.
        response = await client.post(
            "/stream", json=dispatch, headers={"Authorization": "bearer test-runner-token"}
        )
        assert response.status_code == 200


async def test_an_invalid_body_is_422_problem_json(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    good = workspace.mint_dispatch()
    bad_bodies: list[bytes] = [
        b"",
        b"not json",
        b"[]",
        msgspec.json.encode({k: v for k, v in good.items() if k != "otp_run"}),
        msgspec.json.encode({**good, "prompt": 42}),
        msgspec.json.encode({**good, "agent_url": "file:///etc/passwd"}),
        msgspec.json.encode({**good, "otp_setup": ""}),
        msgspec.json.encode({**good, "conversation": [{"role": "system", "content": "x"}]}),
    ]
    async with server.client() as client:
        for body in bad_bodies:
            response = await client.post(
                "/stream", content=body, headers={"Content-Type": "application/json"}
            )
            assert response.status_code == 422, body
            assert response.headers["content-type"] == PROBLEM
            problem = response.json()
            assert problem["type"] == "urn:sandstream:problem:invalid-body"
            assert problem["status"] == 422
            assert problem["detail"].startswith("the body is invalid")
    assert server.runner.admitted == 0
    assert workspace.redemptions == []


async def test_an_oversized_body_is_413(nursery: trio.Nursery, workspace: WorkspaceServer) -> None:
    from tests.server.harness import settings

    server = await start_runner(nursery, runner_settings=settings(max_body_bytes=1000))
    dispatch = workspace.mint_dispatch("x" * 2000)
    async with server.client() as client:
        response = await client.post("/stream", json=dispatch)
    assert response.status_code == 413
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["type"] == "urn:sandstream:problem:payload-too-large"
    assert "1000 bytes" in response.json()["detail"]
    assert server.runner.admitted == 0


async def test_at_capacity_is_503_with_retry_after(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    from tests.server.harness import settings

    server = await start_runner(nursery, runner_settings=settings(max_live=1, retry_after=7))
    workspace.config = scripted(shell("sleep 300"))
    async with server.client() as client:
        async with client.stream("POST", "/stream", json=workspace.mint_dispatch()) as first:
            assert first.status_code == 200
            await server.wait_container()
            response = await client.post("/stream", json=workspace.mint_dispatch())
            assert response.status_code == 503
            assert response.headers["retry-after"] == "7"
            assert response.headers["content-type"] == PROBLEM
            assert response.json()["type"] == "urn:sandstream:problem:at-capacity"
            health = await client.get("/healthz")
            assert health.json() == {"status": "ok", "live": 1, "max_live": 1}
        # The first client is gone: its container is reaped and the slot comes back.
        await server.wait_records(1)
        assert server.runner.live == 0
        workspace.config = scripted()
        response = await client.post("/stream", json=workspace.mint_dispatch())
        assert response.status_code == 200
        assert parse_stream(response.content)[-1]["type"] == "result"


async def test_healthz_and_unknown_routes(server: RunnerServer) -> None:
    async with server.client(auth=False) as client:
        health = await client.get("/healthz")
        assert health.status_code == 200
        assert health.json() == {"status": "ok", "live": 0, "max_live": 16}
        missing = await client.get("/nope")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == PROBLEM
        assert missing.json()["status"] == 404
        wrong_method = await client.get("/stream")
        assert wrong_method.status_code == 405
        assert wrong_method.headers["content-type"] == PROBLEM
        assert "POST" in wrong_method.headers["allow"]


async def test_container_stderr_goes_to_the_log_with_the_turn_id(
    nursery: trio.Nursery, workspace: WorkspaceServer, caplog: pytest.LogCaptureFixture
) -> None:
    wrapper = f"echo 'a line on stderr' >&2; exec {sys.executable} -m sandstream.container"
    launcher = LocalSubprocessLauncher(argv=["sh", "-c", wrapper], stderr="log")
    server = await start_runner(nursery, launcher=launcher)
    with caplog.at_level(logging.INFO, logger="sandstream.container"):
        async with server.client() as client:
            response = await client.post("/stream", json=workspace.mint_dispatch())
        await server.wait_records(1)
    turn_id = response.headers["x-turn-id"]
    messages = [r.getMessage() for r in caplog.records if r.name == "sandstream.container"]
    assert f"[{turn_id}] a line on stderr" in messages
    assert parse_stream(response.content)[-1]["type"] == "result"


async def test_the_runner_token_is_not_in_the_container_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SANDSTREAM_RUNNER_TOKEN", "secret")
    monkeypatch.setenv("SANDSTREAM_API_TOKEN", "api-secret")
    monkeypatch.setenv("SOME_SERVER_SETTING", "private")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
    env = LocalSubprocessLauncher(env={"EXTRA": "1"}).container_env("turn_x", "/tmp/t")
    # an allow-list, not a deny-list: nothing of the server's environment but these
    assert set(env) <= {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "TMPDIR",
        "EXTRA",
        "SANDSTREAM_TURN_ID",
        *HEAP_TUNABLES,
    }
    assert env["SANDSTREAM_TURN_ID"] == "turn_x" and env["EXTRA"] == "1"
    assert env["TMPDIR"] == "/tmp/t"  # its own, not the runner's
    assert env["LANG"] == "C.UTF-8"
    assert env.get("GLIBC_TUNABLES") == heap_env().get("GLIBC_TUNABLES")  # ours, not the runner's
