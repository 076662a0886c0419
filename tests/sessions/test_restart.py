"""A runner killed with SIGKILL and restarted on its data dir: chunks intact, runner_lost."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import trio

from benchmarks.support.session_client import read_session
from benchmarks.support.workspace import WorkspaceServer
from sandstream.server.http.auth import TOKEN_ENV
from tests.server.harness import parse_stream, scripted, shell, wait_gone
from tests.sessions.harness import create, wait_state
from tests.support.container import remove_run_dirs

TOKEN = "restart-token"
CLI = [sys.executable, "-m", "sandstream.server.cli", "runner", "--port", "0"]


async def _start(nursery: trio.Nursery, data_dir: Path) -> tuple[trio.Process, str]:
    """Start ``sandstream runner --data-dir``; return it and its URL."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env[TOKEN_ENV] = TOKEN
    process = await trio.lowlevel.open_process(
        [*CLI, "--data-dir", str(data_dir), "--container-stderr", "discard"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    stderr = bytearray()
    bound = trio.Event()

    async def read_stderr() -> None:
        assert process.stderr is not None
        async with process.stderr:
            while chunk := await process.stderr.receive_some():
                stderr.extend(chunk)
                if b"Running on http://" in stderr:
                    bound.set()

    nursery.start_soon(read_stderr)
    with trio.fail_after(30):
        await bound.wait()
    match = re.search(rb"Running on (http://[\d.]+:\d+)", stderr)
    assert match is not None
    return process, match.group(1).decode()


def _kids(process: trio.Process) -> list[psutil.Process]:
    try:
        return list(psutil.Process(process.pid).children(recursive=True))
    except psutil.Error:
        return []


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


async def test_sigkill_and_restart_keeps_the_chunks_and_fails_running_sessions(
    workspace: WorkspaceServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    first = second = None
    try:
        async with trio.open_nursery() as nursery:
            first, url = await _start(nursery, data_dir)
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
                workspace.config = scripted()
                done_id = await create(client, workspace.mint_dispatch("done"))
                await wait_state(client, done_id, "completed")
                workspace.config = scripted(shell("echo started; sleep 314"))
                running_id = await create(client, workspace.mint_dispatch("running"))
                with trio.fail_after(30):
                    while not any("sleep 314" in _cmdline(kid.pid) for kid in _kids(first)):
                        await trio.sleep(0.02)
                await wait_state(client, running_id, "running")
                before = await read_session(url, running_id, TOKEN, "sse", 0, until_up_to_date=True)
                finished = await read_session(url, done_id, TOKEN, "ndjson", 0)
            # The sandbox (bwrap --die-with-parent) dies with its runner, container and
            # tool included, however they detached: nothing is left to kill by hand.
            leftovers = [kid.pid for kid in psutil.Process(first.pid).children(recursive=True)]
            assert leftovers
            first.send_signal(signal.SIGKILL)
            await first.wait()
            await wait_gone(None, leftovers)
            # Its run dirs lived in the sandbox's own /tmp: nothing is left on the host.
            assert remove_run_dirs() == []

            second, url = await _start(nursery, data_dir)
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
                status = await wait_state(client, running_id, "failed")
                assert status["terminal"]["code"] == "runner_lost"
                assert (await wait_state(client, done_id, "completed"))["terminal"]["type"] == (
                    "result"
                )
                after = await read_session(url, running_id, TOKEN, "ndjson", 0)
                again = await read_session(url, done_id, TOKEN, "ws", 0)
                late = await client.post(f"/sessions/{running_id}/message", json={"text": "hi"})
                assert late.status_code == 409
            second.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                await second.wait()
            nursery.cancel_scope.cancel()
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()
    assert before.chunks  # bootstrap, skills, the step's running line
    assert after.chunks[: len(before.chunks)] == before.chunks
    assert after.closed and after.cursor == status["last_chunk_id"]
    lines = parse_stream(b"".join(after.chunks))
    assert (lines[-1]["type"], lines[-1]["code"]) == ("error", "runner_lost")
    assert again.chunks == finished.chunks and again.closed
