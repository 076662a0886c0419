"""A provider that fails, as real agents in bubblewrap sandboxes meet it through the
runner (``POST /stream``) and its model gateway: each failed call is a ``warn`` line of
the turn's stream; calls that keep failing end the turn ``provider_unavailable``; a
provider that recovers in time lets the turn finish."""

from __future__ import annotations

from typing import Any, Final

import msgspec
import pytest
import trio

from benchmarks.support.model_server import (
    HttpError,
    ModelScript,
    ModelServer,
    start_model_server,
)
from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import AcpPreset, ConfigResponse
from sandstream.server.cli import build_runner_parser, launcher_from_args
from tests.server.harness import settings, start_runner
from tests.support.agents import acp_spec

DEADLINE: Final = 120.0


async def _turn(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    model: ModelServer,
    preset: AcpPreset,
    unavailable_after: float,
) -> list[dict[str, Any]]:
    """One turn of ``preset`` (asking nothing: full access) against ``model``, its
    sandbox allowed nothing on this host; its NDJSON lines."""
    options = {"mode": "bypassPermissions"} if preset == "claude" else {}
    workspace.config = ConfigResponse(agent=acp_spec(preset, model, **options))
    launcher = launcher_from_args(build_runner_parser().parse_args(["--sandbox", "bwrap"]))
    runner_settings = settings(provider_unavailable_after=unavailable_after)
    server = await start_runner(nursery, runner_settings=runner_settings, launcher=launcher)
    providers = {k: v for k, v in model.provider_env(preset).items() if "_MODEL" not in k}
    dispatch = {**workspace.mint_dispatch("go"), "providers": providers}
    lines: list[dict[str, Any]] = []
    async with server.client() as client:
        with trio.fail_after(DEADLINE):
            async with client.stream("POST", "/stream", json=dispatch) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line:
                        lines.append(msgspec.json.decode(line))
    await server.shutdown()
    return lines


def _warnings(lines: list[dict[str, Any]]) -> list[str]:
    return [
        line["message"]
        for line in lines
        if line["type"] == "log"
        and line["level"] == "warn"
        and "model call failed" in line["message"]
    ]


@pytest.mark.parametrize(
    ("preset", "failure"), [("pi", "status-500"), ("claude", "status-500"), ("codex", "drop")]
)
async def test_calls_that_keep_failing_end_the_turn_provider_unavailable(
    nursery: trio.Nursery, workspace: WorkspaceServer, preset: AcpPreset, failure: str
) -> None:
    script = ModelScript(failure=failure)  # type: ignore[arg-type]
    model = await start_model_server(nursery, script)
    lines = await _turn(nursery, workspace, model, preset, unavailable_after=1.0)
    terminal = lines[-1]
    assert terminal["type"] == "error" and terminal["code"] == "provider_unavailable", lines[-3:]
    warnings = _warnings(lines)
    assert warnings, lines
    first = lines.index(next(line for line in lines if line.get("message") == warnings[0]))
    assert first < len(lines) - 1
    if failure == "status-500":
        assert " 500 " in warnings[0] and "told to fail" in warnings[0], warnings[0]
        assert " 500 " in terminal["message"], terminal
    else:
        assert "cut" in warnings[0], warnings[0]


async def test_a_provider_that_recovers_in_time_lets_the_turn_finish(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    model = await start_model_server(nursery, ModelScript(command="echo recovered"))
    model.add(HttpError(500, '{"error": {"message": "overloaded for a moment"}}'))
    lines = await _turn(nursery, workspace, model, "claude", unavailable_after=60.0)
    assert lines[-1]["type"] == "result", lines[-3:]
    [warning] = _warnings(lines)
    assert "overloaded for a moment" in warning and "anthropic" in warning
