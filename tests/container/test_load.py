"""The scripted agent's load mode, for benchmarks: N lines, payload size, target rate."""

from __future__ import annotations

import json
import subprocess
from typing import Literal

import pytest
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.container.agents.scripted import encode_load_lines, load_lines
from sandstream.core.envelope import encode_line
from sandstream.core.schemas import ConfigResponse, LoadSpec, ScriptedAgent, ScriptedStep
from tests.support.container import container_argv, run_container, run_in_process


def _config(load: LoadSpec, *steps: ScriptedStep) -> ConfigResponse:
    return ConfigResponse(agent=ScriptedAgent(load=load, steps=list(steps), message="loaded"))


async def test_log_load_lines(workspace: WorkspaceServer) -> None:
    workspace.config = _config(LoadSpec(lines=1000, payload_bytes=100))
    run = await run_in_process(workspace.mint_dispatch())
    assert run.returncode == 0, run
    load = [line["message"] for line in run.lines if line["message"].endswith("x")]
    assert len(load) == 1000
    assert all(len(message) == 100 for message in load)
    assert [int(message.split()[0]) for message in load] == list(range(1000))
    assert run.terminal["message"] == "loaded"


async def test_step_load_lines_come_in_pairs(workspace: WorkspaceServer) -> None:
    workspace.config = _config(
        LoadSpec(lines=11, payload_bytes=3, line_type="step"),
        ScriptedStep(tool="list_files"),
    )
    run = await run_in_process(workspace.mint_dispatch())
    assert run.returncode == 0, run
    rows = run.turn.steps
    assert [row.id for row in rows[:5]] == [f"load_{i}" for i in range(5)]
    assert all(row.status == "succeeded" for row in rows)
    assert len(rows) == 6  # five load steps, then the planned step
    assert sum(1 for line in run.lines if line["type"] == "step") == 12
    odd = [line for line in run.lines if line.get("message") == "xxx"]
    assert [line["type"] for line in odd] == ["log"]  # the odd line out is a log


async def test_rate_paces_the_lines(workspace: WorkspaceServer) -> None:
    workspace.config = _config(LoadSpec(lines=20, rate=100, payload_bytes=8))
    run = await run_in_process(workspace.mint_dispatch())
    stamps = [line["ts"] for line in run.lines if line["type"] == "log" and "x" in line["message"]]
    assert len(stamps) == 20
    # Line 19 is due 190 ms after line 0: pacing holds the stream back (a lower bound,
    # so a slow machine cannot make this fail).
    assert stamps[-1] - stamps[0] >= 180


async def test_load_through_real_stdout(workspace: WorkspaceServer) -> None:
    workspace.config = _config(LoadSpec(lines=20_000, payload_bytes=200))
    run = await run_container(workspace.mint_dispatch())
    assert run.returncode == 0, run
    assert len(run.lines) == 20_000 + 4  # bootstrap, skills, writeback logs; the result
    assert run.turn.logs == 20_003


async def test_reader_going_away_ends_the_container(workspace: WorkspaceServer) -> None:
    workspace.config = _config(LoadSpec(lines=10_000_000, payload_bytes=100))
    process = await trio.lowlevel.open_process(
        container_argv(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin and process.stdout and process.stderr
    async with process.stdin:
        await process.stdin.send_all(json.dumps(workspace.mint_dispatch()).encode())
    first = await process.stdout.receive_some(65536)
    assert first.startswith(b'{"type":"log"')
    await process.stdout.aclose()
    with trio.fail_after(20):
        stderr = b""
        while chunk := await process.stderr.receive_some(65536):
            stderr += chunk
        await process.wait()
    assert process.returncode == 1
    assert b"Traceback" not in stderr
    assert not workspace.requests("results")


@pytest.mark.parametrize("line_type", ["log", "step"])
@pytest.mark.parametrize("payload_bytes", [0, 1, 5, 300])
def test_fast_load_encoding_is_byte_identical_to_the_envelopes(
    line_type: Literal["log", "step"], payload_bytes: int
) -> None:
    spec = LoadSpec(lines=301, payload_bytes=payload_bytes, line_type=line_type)
    reference = b"".join(encode_line(line) for line in load_lines(0, 301, spec, 1700000000123))
    assert encode_load_lines(0, 301, spec, 1700000000123) == reference
    assert encode_load_lines(17, 40, spec, 5) == b"".join(
        encode_line(line) for line in load_lines(17, 40, spec, 5)
    )
