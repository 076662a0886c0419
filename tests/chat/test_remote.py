"""Remote mode: the chat backend dispatches to a separate ``sandstream runner`` process."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from benchmarks.support.ports import free_port
from benchmarks.support.runner_process import RunnerProcess, start_runner_process
from tests.chat.harness import (
    DEADLINE,
    RUNNER_TOKEN,
    WORKSPACE,
    EventReader,
    descendants,
    persisted_form,
    plans,
    running_step,
    scripted,
    shell,
    sleeping,
    start_chat_server,
)
from tests.server.harness import wait_until_alive
from tests.support import processes
from tests.support.container import alive, remove_run_dirs

pytestmark = pytest.mark.usefixtures("chat_database")


def _sessions(tmp_path: Path) -> tuple[str, ...]:
    """The runner's ``--data-dir`` (its durable sessions: chat turns run as sessions),
    and no warm pool: every process the runner has is then a turn's."""
    return "--data-dir", str(tmp_path / "runner-data"), "--warm-pool", "0"


async def _wait_no_children(runner: RunnerProcess) -> None:
    with trio.fail_after(DEADLINE):
        while descendants(runner.pid):
            await trio.sleep(0.05)


async def test_a_remote_turn_and_a_remote_disconnect(nursery: trio.Nursery, tmp_path: Path) -> None:
    runner = await start_runner_process(nursery, *_sessions(tmp_path), token=RUNNER_TOKEN)
    server = await start_chat_server(
        nursery,
        tmp_path,
        embedded=False,
        sandbox_url=runner.url,
        agent=plans(slow=sleeping(300)),
    )
    run = await server.turn("hello remote")
    assert run.status == 200 and run.kinds[-2:] == ["result", "done"]
    assert run.data("result")[0]["message"] == "Done: hello remote"
    chat = await server.chat(run.chat_id)
    assert chat["messages"][-1] == persisted_form(run.events, chat["messages"][-1])
    with trio.fail_after(DEADLINE):
        while not runner.records():
            await trio.sleep(0.05)
    assert runner.records()[0]["outcome"] == "result"  # the runner process ran it

    # The client leaves mid-turn with onDisconnect: cancel: the runner's session is
    # interrupted and its container torn down; the turn persists as interrupted.
    body = {
        "workspaceId": WORKSPACE,
        "chatId": run.chat_id,
        "message": "slow remote",
        "onDisconnect": "cancel",
    }
    async with server.stream(body) as response:
        reader = EventReader(response)
        await reader.until(running_step)
        assert descendants(runner.pid)  # the container runs in the runner process
    await _wait_no_children(runner)
    chat = await server.wait_chat(
        run.chat_id, lambda c: len(c["messages"]) == 4 and "activeMessageId" not in c
    )
    assert chat["messages"][-1]["status"] == "interrupted"
    with trio.fail_after(DEADLINE):
        while len(runner.records()) < 2:
            await trio.sleep(0.05)
    assert runner.records()[1]["terminal"] == "interrupted"
    again = await server.turn("still there?", chat_id=run.chat_id)
    assert again.status == 200 and again.kinds[-2:] == ["result", "done"]


async def test_an_unreachable_or_refusing_runner_fails_the_turn_cleanly(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(
        nursery, tmp_path, embedded=False, sandbox_url=f"http://127.0.0.1:{free_port()}"
    )
    async with server.client(auth=False) as client:
        health = await client.get("/healthz")  # the chat backend's own: no runner here
    assert health.status_code == 200 and health.json() == {"status": "ok", "live": 0}
    run = await server.turn("anyone?")
    assert run.status == 502
    assert run.problem["type"] == "urn:sandstream:problem:runner-failed"
    assert await server.store.list_chats(WORKSPACE, limit=10, now=0) == []  # nothing kept

    runner = await start_runner_process(nursery, *_sessions(tmp_path), token="another-token")
    refusing = await start_chat_server(
        nursery, tmp_path / "second", embedded=False, sandbox_url=runner.url
    )
    run = await refusing.turn("let me in")
    assert run.status == 502 and "401" in run.problem["detail"]


async def test_the_workflow_environment_picks_the_runner(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    runner = await start_runner_process(nursery, *_sessions(tmp_path), token=RUNNER_TOKEN)
    server = await start_chat_server(nursery, tmp_path, allowed_sandbox_urls={runner.url})
    async with server.client() as client:
        put = await client.put(
            "/api/workflows/wf_remote/environment",
            json={"workspaceId": WORKSPACE, "vars": {"SANDBOX_URL": runner.url, "A": "1"}},
        )
        assert put.status_code == 200, put.text
        got = await client.get(
            "/api/workflows/wf_remote/environment", params={"workspaceId": WORKSPACE}
        )
        assert got.json()["vars"] == {"SANDBOX_URL": runner.url, "A": "1"}
    run = await server.turn("via the workflow", workflowId="wf_remote")
    assert run.status == 200 and run.kinds[-2:] == ["result", "done"]
    with trio.fail_after(DEADLINE):
        while not runner.records():
            await trio.sleep(0.05)
    # A runner nobody allowed is refused before anything is written.
    refused = await server.turn("elsewhere", sandboxUrl="http://evil.example:9")
    assert refused.status == 422
    assert refused.problem["type"] == "urn:sandstream:problem:bad-runner"
    chats: list[Any] = await server.store.list_chats(WORKSPACE, limit=10, now=0)
    assert len(chats) == 1
    assert msgspec.json.decode(run.events[0].data)["chatId"] == chats[0].id


async def test_a_runner_that_dies_mid_turn_and_restarts_keeps_the_turns_steps(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    port = free_port()
    runner = await start_runner_process(
        nursery, "--port", str(port), *_sessions(tmp_path), token=RUNNER_TOKEN
    )
    server = await start_chat_server(
        nursery, tmp_path, embedded=False, sandbox_url=runner.url, agent=plans(slow=sleeping(300))
    )
    body = {"workspaceId": WORKSPACE, "message": "slow then the runner dies"}
    async with server.stream(body) as response:
        reader = EventReader(response)
        await reader.until(running_step)
        # The step runs before its tool does: list the container's tree once the
        # tool's sleep is in it, or the tool starts after the list and is missed.
        await wait_until_alive(runner.pid, "sleep 300")
        orphans = descendants(runner.pid)
        runner.process.send_signal(signal.SIGKILL)
        processes.kill(orphans)  # nobody reaps a SIGKILLed runner's containers: clean up
        # The runner comes back on its data dir: the session it lost ends there with
        # error{runner_lost}, which the chat (reconnecting) streams and settles.
        await start_runner_process(
            nursery, "--port", str(port), *_sessions(tmp_path), token=RUNNER_TOKEN
        )
        error = await reader.until(lambda e: e.event == "error")
        done = await reader.next()
    with trio.fail_after(DEADLINE):
        while alive(orphans):
            await trio.sleep(0.05)
    # A bwrap sandbox's run dirs live in its own /tmp: nothing is left on the host.
    assert remove_run_dirs() == []
    assert done is not None and done.event == "done"
    assert msgspec.json.decode(error.data)["code"] == "runner_lost"
    chat_id = msgspec.json.decode(reader.events[0].data)["chatId"]
    chat = await server.wait_chat(chat_id, lambda c: "activeMessageId" not in c)
    assert chat["messages"][-1]["status"] == "failed"
    assert chat["messages"][-1] == persisted_form(reader.events, chat["messages"][-1])
    steps = next(b for b in chat["messages"][-1]["content"] if b["type"] == "steps")["steps"]
    assert [s["status"] for s in steps] == ["failed"]  # the step it had, closed


async def test_a_remote_turn_gets_its_attachments_and_streams_its_written_back_files(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    runner = await start_runner_process(nursery, *_sessions(tmp_path), token=RUNNER_TOKEN)
    agent = scripted(shell("tr a-z A-Z < attachments/in.txt > output/out.txt"))
    server = await start_chat_server(
        nursery, tmp_path, embedded=False, sandbox_url=runner.url, agent=agent
    )
    params = {"workspaceId": WORKSPACE}
    async with server.client() as client:
        chat = (await client.post("/api/assistant/chats", json=params)).json()
        upload = await client.post(
            f"/api/assistant/chats/{chat['id']}/files",
            params=params,
            files=[("files", ("in.txt", b"shout\n", "text/plain"))],
        )
    [attached] = upload.json()["files"]
    run = await server.turn("go", chat_id=chat["id"], attachmentIds=[attached["id"]])
    assert run.kinds == [
        *("start", "step", "step", "step", "step"),
        *("delta", "delta", "files", "result", "done"),
    ]
    assert [(s.name, s.status) for s in run.folded().steps] == [
        ("download_attachments", "succeeded"),
        ("run_shell", "succeeded"),
    ]
    [files] = run.data("files")
    stored = (await server.chat(chat["id"]))["messages"][-1]["fileAttachments"]
    assert files == {"files": stored}
    [out] = stored
    assert out["name"] == "out.txt" and out["size"] == 6
    async with server.client() as client:
        got = await client.get(
            f"/api/assistant/chats/{chat['id']}/files/{out['id']}", params=params
        )
    assert got.content == b"SHOUT\n"
