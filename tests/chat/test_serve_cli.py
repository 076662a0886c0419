"""`sandstream serve` as a real process: tokens, SIGKILL and stale locks, SIGTERM, bad config."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import msgspec
import pytest
import trio

from tests.chat import databases
from tests.chat.databases import open_store
from tests.chat.harness import (
    DEADLINE,
    WORKSPACE,
    EventReader,
    descendants,
    kill_and_wait,
    running_step,
    start_serve_process,
)
from tests.server.harness import wait_until_alive
from tests.support.container import alive, remove_run_dirs

SLOW = {
    "agent": {
        "kind": "scripted",
        "steps": [{"tool": "run_shell", "args": {"command": "sleep 120", "timeout_sec": 300}}],
        "message": "slept",
    }
}
QUICK = {"agent": {"kind": "scripted", "message": "quick: {prompt}"}}


@pytest.mark.usefixtures("chat_database")
async def test_sigkill_mid_turn_then_restart_the_stale_lock_expires(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    first = await start_serve_process(nursery, data_dir, SLOW)
    # First start: a token was generated, saved (0600) and printed.
    token_file = data_dir / "api-token"
    token = token_file.read_text().strip()
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert any(token in line for line in first.stdout)
    body = {"workspaceId": WORKSPACE, "message": "slow and doomed"}
    async with (
        first.client(token) as client,
        client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
    ):
        assert response.status_code == 200
        reader = EventReader(response)
        await reader.until(running_step)
        start = msgspec.json.decode(reader.events[0].data)
        # Kill the server only once the tool's sleep runs: a tool still starting when
        # its container is cleaned up below would be missed and outlive the test.
        await wait_until_alive(first.process.pid, "sleep 120")
        orphans = descendants(first.process.pid)
        first.process.send_signal(signal.SIGKILL)
        with trio.fail_after(DEADLINE):
            await first.exited.wait()
    assert first.process.returncode == -signal.SIGKILL
    # Nobody reaps the orphaned container of a SIGKILLed server: clean it up.
    await kill_and_wait(orphans)
    # A bwrap sandbox's run dirs live in its own /tmp: nothing is left on the host.
    assert remove_run_dirs() == []

    second = await start_serve_process(nursery, data_dir, QUICK)
    assert not any(token in line for line in second.stdout)  # not printed again
    assert any("api-token" in line for line in second.stdout)
    refusals = 0
    async with second.client(token) as client:
        with trio.fail_after(DEADLINE):
            while True:
                response = await client.post(
                    "/api/assistant/chat/stream",
                    json={"workspaceId": WORKSPACE, "chatId": start["chatId"], "message": "again"},
                )
                if response.status_code == 200:
                    break
                assert response.status_code == 409, response.text
                assert response.json()["activeMessageId"] == start["assistantMessageId"]
                refusals += 1
                await trio.sleep(0.1)
        assert response.text.rstrip().endswith('"diagnostics":0}')
        chat = (
            await client.get(
                f"/api/assistant/chats/{start['chatId']}", params={"workspaceId": WORKSPACE}
            )
        ).json()
    roles = [(m["role"], m.get("status")) for m in chat["messages"]]
    assert roles == [
        ("user", None),
        ("assistant", "failed"),
        ("user", None),
        ("assistant", "complete"),
    ]
    lost = chat["messages"][1]
    assert lost["id"] == start["assistantMessageId"]
    # Adopted by the restarted server: settled from its session, its step kept.
    assert lost["content"][-1]["code"] == "runner_lost"
    steps = next(b for b in lost["content"] if b["type"] == "steps")["steps"]
    assert [s["status"] for s in steps] == ["failed"]
    assert chat["messages"][3]["content"][0]["text"] == "quick: again"
    second.process.send_signal(signal.SIGTERM)
    with trio.fail_after(DEADLINE):
        await second.exited.wait()
    assert second.process.returncode == 0


@pytest.mark.usefixtures("chat_database")
async def test_sigterm_ends_live_turns_and_persists_them(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    served = await start_serve_process(nursery, data_dir, SLOW)
    token = (data_dir / "api-token").read_text().strip()
    body = {"workspaceId": WORKSPACE, "message": "slow until SIGTERM"}
    async with (
        served.client(token) as client,
        client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
    ):
        reader = EventReader(response)
        await reader.until(running_step)
        children = descendants(served.process.pid)
        served.process.send_signal(signal.SIGTERM)
        error = await reader.until(lambda e: e.event == "error")
        done = await reader.next()
    assert msgspec.json.decode(error.data)["code"] == "shutdown"
    assert done is not None and done.event == "done"
    with trio.fail_after(DEADLINE):
        await served.exited.wait()
    assert served.process.returncode == 0
    assert not alive(children)
    # The SQLite files closed clean: checkpointed, their WAL and shared memory removed
    # (on PostgreSQL the chat store is not in the data dir at all).
    on_sqlite = databases.current().server is None
    assert sorted(path.name for path in data_dir.glob("*.sqlite3*")) == [
        *(["chat.sqlite3"] if on_sqlite else []),
        "sessions.sqlite3",
    ]
    store = await open_store(data_dir)
    try:
        chat_id = msgspec.json.decode(reader.events[0].data)["chatId"]
        messages = await store.get_messages(WORKSPACE, chat_id)
        chat = await store.get_chat(WORKSPACE, chat_id, now=0)
    finally:
        await store.close()
    assert messages[-1].status == "failed"
    assert chat.active_message_id is None


async def test_no_runner_is_a_start_up_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SANDBOX_URL"}
    argv = [str(Path(sys.executable).parent / "sandstream"), "serve"]
    argv += ["--data-dir", str(tmp_path), "--no-embedded-runner", "--port", "0"]
    result = await trio.run_process(
        argv, capture_stdout=True, capture_stderr=True, env=env, check=False
    )
    assert result.returncode == 2
    assert b"SANDBOX_URL" in result.stderr
    assert b"listening" not in result.stdout


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://:hunter2@cache/zero", b"database must be a number"),
        ("rediss://cache?ssl_ca_certs=/nonexistent/ca.pem", b"/nonexistent/ca.pem"),
    ],
)
async def test_a_malformed_redis_url_is_one_line_at_start_up(
    tmp_path: Path, url: str, says: bytes
) -> None:
    argv = [str(Path(sys.executable).parent / "sandstream"), "serve", "--port", "0"]
    argv += ["--data-dir", str(tmp_path), "--redis-url", url]
    result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 2
    [line] = result.stderr.decode().splitlines()
    assert says.decode() in line and "hunter2" not in line
    assert b"listening" not in result.stdout


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--vapid-key-file", "/nonexistent/vapid.pem"], "cannot read the VAPID key file"),
        (["--vapid-key-file", "{garbage}"], "not an unencrypted PEM private key"),
        (["--apns-key-file", "{garbage}"], "APNs needs its key id, team id and topic"),
        (["--vapid-key-file", "{garbage}", "--vapid-contact", "ops"], "mailto: or https:"),
    ],
)
async def test_bad_push_credentials_are_one_line_at_start_up(
    tmp_path: Path, flags: list[str], says: str
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key\n")
    argv = [str(Path(sys.executable).parent / "sandstream"), "serve", "--port", "0"]
    argv += ["--data-dir", str(tmp_path / "data")]
    argv += [flag.format(garbage=garbage) for flag in flags]
    result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 2
    [line] = result.stderr.decode().splitlines()
    assert says in line
    assert b"listening" not in result.stdout


async def test_a_port_already_in_use_is_one_line_and_a_failure(tmp_path: Path) -> None:
    argv = [str(Path(sys.executable).parent / "sandstream"), "serve", "--data-dir", str(tmp_path)]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = await trio.run_process(
            [*argv, "--port", str(port)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"sandstream serve: 127.0.0.1:{port} is already in use"
    ]
    assert b"listening" not in result.stdout


async def test_a_reader_gone_before_the_first_line_ends_serve_quietly(tmp_path: Path) -> None:
    argv = [str(Path(sys.executable).parent / "sandstream"), "serve", "--port", "0"]
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `sandstream serve | head -0`
    try:
        result = await trio.run_process(
            [*argv, "--data-dir", str(tmp_path)],
            stdout=write_end,
            capture_stderr=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert result.returncode == 128 + signal.SIGPIPE
    assert b"Traceback" not in result.stderr and b"Broken pipe" not in result.stderr
