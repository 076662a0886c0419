"""A runner killed with SIGKILL and restarted on its data dir: chunks intact, runner_lost."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import psutil
import trio

from benchmarks.support.runner_process import start_runner_process
from benchmarks.support.session_client import read_session
from benchmarks.support.workspace import WorkspaceServer
from tests.server.harness import parse_stream, scripted, shell, wait_gone
from tests.sessions.harness import create, wait_state
from tests.support.container import remove_run_dirs

TOKEN = "restart-token"
_DISCARD = ("--container-stderr", "discard")


def _kids(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
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
    async with trio.open_nursery() as nursery:
        first = await start_runner_process(
            nursery, "--data-dir", str(data_dir), *_DISCARD, token=TOKEN
        )
        async with httpx.AsyncClient(base_url=first.url, headers=headers, timeout=30) as client:
            workspace.config = scripted()
            done_id = await create(client, workspace.mint_dispatch("done"))
            await wait_state(client, done_id, "completed")
            workspace.config = scripted(shell("echo started; sleep 314"))
            running_id = await create(client, workspace.mint_dispatch("running"))
            with trio.fail_after(30):
                while not any("sleep 314" in _cmdline(kid.pid) for kid in _kids(first.pid)):
                    await trio.sleep(0.02)
            await wait_state(client, running_id, "running")
            before = await read_session(
                first.url, running_id, TOKEN, "sse", 0, until_up_to_date=True
            )
            finished = await read_session(first.url, done_id, TOKEN, "ndjson", 0)
        # The sandbox (bwrap --die-with-parent) dies with its runner, container and
        # tool included, however they detached: nothing is left to kill by hand.
        leftovers = [kid.pid for kid in _kids(first.pid)]
        assert leftovers
        first.process.send_signal(signal.SIGKILL)
        await first.process.wait()
        await wait_gone(None, leftovers)
        # Its run dirs lived in the sandbox's own /tmp: nothing is left on the host.
        assert remove_run_dirs() == []

        second = await start_runner_process(
            nursery, "--data-dir", str(data_dir), *_DISCARD, token=TOKEN
        )
        url = second.url
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
        second.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await second.process.wait()
        nursery.cancel_scope.cancel()
    assert before.chunks  # bootstrap, skills, the step's running line
    assert after.chunks[: len(before.chunks)] == before.chunks
    assert after.closed and after.cursor == status["last_chunk_id"]
    lines = parse_stream(b"".join(after.chunks))
    assert (lines[-1]["type"], lines[-1]["code"]) == ("error", "runner_lost")
    assert again.chunks == finished.chunks and again.closed
