"""A container printing garbage or a 50 MB line: only valid lines reach the client.

The real container runs behind a shell wrapper that injects the bad output into the
same stdout pipe, before and after the container's own lines.
"""

from __future__ import annotations

import os
import sys

import psutil
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.server import LocalSubprocessLauncher
from tests.server.harness import parse_stream, scripted, shell, start_runner

FIFTY_MB = 50 * 1024 * 1024


async def test_garbage_and_a_50_mb_line_never_reach_the_client(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    garbage = (
        r"printf 'not json\n{\"type\":\"bogus\"}\n{\"type\":\"log\"}\n\377\376\n"
        r"{\"type\":\"result\",\"message\":42}\n[1,2]\n'"
    )
    wrapper = (
        f"{garbage}; "
        f"head -c {FIFTY_MB} /dev/zero | tr '\\0' a; echo; "
        f"{sys.executable} -m sandstream.container; "
        r"printf '{\"type\":\"log\",\"level\":\"info\",\"message\":\"after the end\"}\n'"
    )
    launcher = LocalSubprocessLauncher(argv=["sh", "-c", wrapper], stderr="discard")
    server = await start_runner(nursery, launcher=launcher)
    workspace.config = scripted(shell("echo tool-output"), message="survived")

    me = psutil.Process(os.getpid())
    baseline = me.memory_info().rss
    peak = baseline

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, me.memory_info().rss)
            await trio.sleep(0.005)

    async with trio.open_nursery() as sampler:
        sampler.start_soon(sample)
        async with server.client() as client:
            response = await client.post("/stream", json=workspace.mint_dispatch())
        sampler.cancel_scope.cancel()

    lines = parse_stream(response.content)  # every line valid, one terminal, last
    assert lines[-1] == {**lines[-1], "type": "result", "message": "survived"}
    assert not any("after the end" in str(line) for line in lines)
    assert len(response.content) < 10_000
    (record,) = await server.wait_records(1)
    # not json, bogus type, missing fields, bad UTF-8, wrong type, not an object,
    # the 50 MB line, and the line after the terminal
    assert record.diagnostics == 8
    assert record.outcome == "result"
    # The 50 MB line was never held whole: the runner's memory stayed bounded
    # (read size + the 1 MiB line bound, plus noise).
    assert peak - baseline < 24 * 1024 * 1024, (peak - baseline) / 1e6


async def test_strict_mode_ends_the_turn_at_the_first_invalid_line(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    from tests.server.harness import settings

    wrapper = f"printf 'garbage\\n'; exec {sys.executable} -m sandstream.container"
    launcher = LocalSubprocessLauncher(argv=["sh", "-c", wrapper], stderr="discard")
    server = await start_runner(nursery, runner_settings=settings(strict=True), launcher=launcher)
    workspace.config = scripted(shell("sleep 315"))
    async with server.client() as client:
        response = await client.post("/stream", json=workspace.mint_dispatch())
    (line,) = parse_stream(response.content)
    assert (line["type"], line["code"]) == ("error", "protocol_error")
    (record,) = await server.wait_records(1)
    assert record.outcome == "protocol_error"
    assert record.teardown_ms is not None  # the container was stopped, not waited for
