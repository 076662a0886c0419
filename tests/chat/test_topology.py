"""The deployment of docs/deploy.md, whole: two ``sandstream serve`` replicas that share
nothing but the chat database and Redis (with a password), a ``sandstream runner``
process, and a forwarder in front of the replicas as the service's public URL. The
replica that moves a running turn is killed (SIGKILL) mid-turn; a browser on the other
replica resumes the turn and shows its answer; the stored message is the fold of every chunk
of the session exactly once, and holds the result and the file the turn wrote.

On PostgreSQL the replicas have data dirs of their own; on SQLite (one machine) they
share one, the database being a file in it.
"""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from playwright.sync_api import sync_playwright

from benchmarks.support.redis_server import open_redis_server
from benchmarks.support.runner_process import start_runner_process
from sandstream.server.chat.store.sql import PostgresChatStore, SQLiteChatStore
from tests.chat.databases import ChatDatabases
from tests.chat.harness import (
    DEADLINE,
    RUNNER_TOKEN,
    WORKSPACE,
    EventReader,
    lease_holder,
    output_message,
    runner_output,
    runner_position,
    running_step,
    settled_assistant,
    start_serve_process,
)
from tests.support.forwarder import start_forwarder
from tests.web.harness import assistant, launch, signed_in

REPORT = "# Report\n\nWritten before the replica died.\n"
ANSWER = "the report is written and the lines counted"
TURN = {
    "agent": {
        "kind": "scripted",
        "steps": [
            {"tool": "write_file", "args": {"path": "output/report.md", "content": REPORT}},
            {
                "tool": "run_shell",
                "args": {
                    "command": "for i in $(seq 1 60); do echo line $i; sleep 0.1; done",
                    "timeout_sec": 300,
                },
            },
        ],
        "message": ANSWER,
    }
}
"""A turn that writes a file, then prints a line every 0.1 s for about 6 s."""


def _hostport(url: str) -> str:
    return url.removeprefix("http://").rstrip("/")


def _browser_resumes(base_url: str, token: str, chat_id: str) -> str:
    """Chromium on ``base_url``'s web app opens the chat of the live turn and waits
    until it shows the answer complete; the answer's text as shown."""
    with (
        tempfile.TemporaryDirectory(dir="/tmp", prefix="chromium-") as short,
        sync_playwright() as playwright,
    ):
        browser = launch(playwright, Path(short))
        try:
            context = browser.new_context()
            page = signed_in(context, base_url, f"/#chat={chat_id}", token=token)
            text: str = page.inner_text(assistant(page, "complete"))
            return text
        finally:
            browser.close()


@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
async def test_a_turn_survives_the_replica_that_moves_it(
    nursery: trio.Nursery, tmp_path: Path, request: pytest.FixtureRequest, database: str
) -> None:
    databases = ChatDatabases(
        request.getfixturevalue("postgres_server") if database == "postgresql" else None
    )
    try:
        await _run_the_topology(nursery, tmp_path, databases)
    finally:
        databases.drop_all()


async def _run_the_topology(
    nursery: trio.Nursery, tmp_path: Path, databases: ChatDatabases
) -> None:
    runner = await start_runner_process(
        nursery, "--data-dir", str(tmp_path / "runner"), token=RUNNER_TOKEN
    )
    balancer = await start_forwarder(nursery)
    shared = tmp_path / "shared"
    url = databases.url(shared)  # PostgreSQL: one database for both replicas
    dirs = [tmp_path / "replica-1", tmp_path / "replica-2"] if url else [shared, shared]
    for data_dir in dirs:
        data_dir.mkdir(exist_ok=True)
        (data_dir / "runner-token").write_text(RUNNER_TOKEN + "\n")
        (data_dir / "api-token").write_text("topology-api-token\n")
    async with open_redis_server("--requirepass", "lease-secret") as redis:
        flags = [
            "--no-embedded-runner",
            "--sandbox-url", runner.url,
            "--redis-url", redis.url.replace("redis://", "redis://:lease-secret@"),
            "--public-url", balancer.url,
            *(["--database-url", url] if url else []),
        ]  # fmt: skip
        first = await start_serve_process(nursery, dirs[0], TURN, *flags)
        second = await start_serve_process(nursery, dirs[1], TURN, *flags)
        balancer.backends = [_hostport(first.url), _hostport(second.url)]
        token = "topology-api-token"

        # The turn starts on the first replica, which claims its session (unless the
        # other's sweep comes first) and moves it.
        body = {"workspaceId": WORKSPACE, "message": "write the report, count the lines"}
        async with (
            first.client(token) as client,
            client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
        ):
            assert response.status_code == 200
            reader = EventReader(response)
            await reader.until(lambda e: running_step(e) and "run_shell" in e.data)
            start: dict[str, Any] = msgspec.json.decode(reader.events[0].data)
        store = await (PostgresChatStore.open(url) if url else SQLiteChatStore.open(shared))
        try:
            session_id = start["sessionId"]
            with trio.fail_after(DEADLINE):
                while await store.moved_chunks.generation(session_id) == 0:
                    await trio.sleep(0.02)
            assert await store.moved_chunks.generation(session_id) == 1
            owner, other = await lease_holder((first, second), token)
            owner.process.send_signal(signal.SIGKILL)
            with trio.fail_after(DEADLINE):
                await owner.exited.wait()
            at_the_kill = await runner_position(runner.url, session_id)

            # A browser on the other replica resumes the live turn to its answer.
            shown = await trio.to_thread.run_sync(
                _browser_resumes, other.url.rstrip("/"), token, start["chatId"]
            )
            assert ANSWER in shown

            # The other replica took the session over and folded it whole.
            message = await settled_assistant(store, start)
            output = await runner_output(runner.url, session_id)
            assert await store.moved_chunks.read(session_id) == []  # no copy of them
            assert at_the_kill < len(output)
            assert await store.moved_chunks.generation(session_id) >= 2
            expected = output_message(output, message)
            # The fold of the whole output, with the written file attached.
            assert [f.name for f in message.file_attachments] == ["report.md"]
            stored = msgspec.structs.replace(message, file_attachments=[])
            assert msgspec.json.encode(stored) == msgspec.json.encode(expected)
            assert message.status == "complete"
            chat = await store.get_chat(WORKSPACE, start["chatId"], now=0)
            assert chat.active_message_id is None  # the lock was released
        finally:
            await store.close()

        # The written file downloads through the public URL, from the replica alive.
        async with other.client(token) as client:
            download = await client.get(
                f"{balancer.url}/api/assistant/chats/{start['chatId']}/files/"
                f"{message.file_attachments[0].id}",
                params={"workspaceId": WORKSPACE},
            )
        assert download.status_code == 200 and download.text == REPORT
        other.process.send_signal(signal.SIGTERM)
        with trio.fail_after(DEADLINE):
            await other.exited.wait()
