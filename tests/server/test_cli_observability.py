"""``sandstream runner`` as a real process: its log in one format (JSON lines when
stderr is no terminal, text with ``--log-format text``) and ``--metrics-bind``."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import msgspec
import trio
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.support.ports import free_port
from benchmarks.support.runner_process import RUNNING, RunnerProcess, start_runner_process
from benchmarks.support.workspace import WorkspaceServer
from sandstream.server.http.auth import TOKEN_ENV
from tests.server.harness import load, parse_stream

CLI = [sys.executable, "-m", "sandstream.server.cli", "runner"]
TOKEN = "cli-metrics-token"
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: ")


def _urls(runner: RunnerProcess) -> list[str]:
    """Every address it said it listens on."""
    return [found[1] for line in runner.stderr if (found := RUNNING.search(line))]


@asynccontextmanager
async def running(*args: str, listeners: int = 1, **env: str) -> AsyncIterator[RunnerProcess]:
    """``sandstream runner --port 0 ARGS`` with stderr a pipe (no terminal) until
    ``listeners`` addresses were logged; SIGTERM and exit status 0 when the block ends."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SANDSTREAM_")}
    async with trio.open_nursery() as nursery:
        runner = await start_runner_process(
            nursery, "--container-stderr", "discard", *args, token=TOKEN, env={**environ, **env}
        )
        await runner.wait_for(lambda: len(_urls(runner)) >= listeners, f"{listeners} addresses", 30)
        yield runner
        runner.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await runner.exited.wait()
    assert runner.process.returncode == 0, runner.stderr


async def test_the_log_is_json_lines_when_stderr_is_no_terminal(
    workspace: WorkspaceServer,
) -> None:
    workspace.config = load(5)
    async with running("--log-level", "info") as runner:
        url = _urls(runner)[0]
        async with (
            httpx.AsyncClient(base_url=url, timeout=30) as client,
            client.stream(
                "POST",
                "/stream",
                json=workspace.mint_dispatch(),
                headers={"Authorization": f"Bearer {TOKEN}"},
            ) as response,
        ):
            lines = parse_stream(await response.aread())
    assert lines[-1]["type"] == "result"
    records = [msgspec.json.decode(line) for line in runner.stderr if line]
    for record in records:
        assert {"ts", "level", "logger", "message"} <= record.keys(), record
        assert record["ts"].endswith("Z")
    assert any(
        record["logger"] == "hypercorn.error" and record["message"].startswith("Running on")
        for record in records
    )
    turns = [record for record in records if record.get("event") == "turn"]
    assert len(turns) == 1
    turn = turns[0]
    assert (turn["logger"], turn["level"], turn["message"]) == ("sandstream.access", "info", "turn")
    assert (turn["outcome"], turn["terminal"], turn["lines"]) == ("result", "result", len(lines))


async def test_log_format_text_writes_readable_lines() -> None:
    async with running("--log-format", "text") as text:
        pass
    async with running(SANDSTREAM_LOG_FORMAT="text") as from_env:
        pass
    for lines in (text.stderr, from_env.stderr):
        written = [line for line in lines if line]
        assert written
        for line in written:
            assert TEXT_LINE.match(line), line
        assert any(" INFO hypercorn.error: Running on http://" in line for line in written)


async def test_a_bad_log_format_or_metrics_address_is_a_usage_error() -> None:
    env = {**os.environ, TOKEN_ENV: TOKEN}
    for args, extra, named in (
        ([], {"SANDSTREAM_LOG_FORMAT": "yaml"}, b"not a log format: 'yaml'"),
        (["--log-format", "xml"], {}, b"not a log format: 'xml'"),
        (["--metrics-bind", "9100"], {}, b"not HOST:PORT: '9100'"),
        (["--metrics-bind", "127.0.0.1:99999"], {}, b"a port is 0 to 65535"),
    ):
        result = await trio.run_process(
            [*CLI, "--port", "0", *args], env={**env, **extra}, capture_stderr=True, check=False
        )
        assert result.returncode == 2, result.stderr
        assert named in result.stderr, result.stderr


async def test_metrics_bind_serves_them_alone_without_a_token(
    workspace: WorkspaceServer,
) -> None:
    port = free_port()
    workspace.config = load(3)
    async with running("--metrics-bind", f"127.0.0.1:{port}", listeners=2) as runner:
        main, metrics = _urls(runner)
        assert metrics == f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=main, timeout=30, headers=auth) as client:
            refused = await client.get("/metrics")
            async with client.stream("POST", "/stream", json=workspace.mint_dispatch()) as turn:
                assert parse_stream(await turn.aread())[-1]["type"] == "result"
        assert refused.status_code == 404
        assert refused.headers["content-type"] == "application/problem+json"
        async with httpx.AsyncClient(base_url=metrics, timeout=30) as client:
            with trio.fail_after(30):  # the turn's record is written once it closed
                while True:
                    served = await client.get("/metrics")
                    assert served.status_code == 200, served.text
                    samples = {
                        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
                        for family in text_string_to_metric_families(served.text)
                        for sample in family.samples
                    }
                    if samples[("sandstream_turns_ended_total", (("outcome", "result"),))]:
                        break
                    await trio.sleep(0.02)
            elsewhere = await client.get("/stream")
        assert samples[("sandstream_turns_started_total", ())] == 1
        assert samples[("sandstream_containers_started_total", ())] == 1
        assert elsewhere.status_code == 404
