"""Callbacks through a load balancer: a turn's sandbox calls back via the public URL (a
real TCP forwarder on loopback, :mod:`tests.support.forwarder`), so it outlives the
replica that served its first callbacks; a lost answer is retried under its
idempotency key and stored once; a writeback that never gets through keeps the answer
and names the files it could not write."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import msgspec
import trio

from benchmarks.support.redis_server import open_redis_server
from benchmarks.support.runner_process import start_runner_process
from sandstream.core.persistence import TextBlock
from sandstream.server.chat import SqlChatStore, SQLiteChatStore
from tests.chat.harness import (
    DEADLINE,
    RUNNER_TOKEN,
    WORKSPACE,
    ChatServer,
    EventReader,
    running_step,
    scripted,
    settled_assistant,
    shell,
    start_chat_server,
    start_serve_process,
    write,
)
from tests.support.forwarder import start_forwarder

REPORT = "# quarterly report\n"
WRITES_THEN_WAITS = {
    "agent": {
        "kind": "scripted",
        "steps": [
            {"tool": "write_file", "args": {"path": "output/report.md", "content": REPORT}},
            {"tool": "run_shell", "args": {"command": "sleep 4", "timeout_sec": 60}},
        ],
        "message": "the report is written",
    }
}
"""A turn that produces a file, then runs long enough for its replica to be killed."""


def _hostport(url: str) -> str:
    return url.removeprefix("http://").rstrip("/")


async def _result_rows(store: SqlChatStore, start: dict[str, Any]) -> list[str]:
    """The names of every file row written back for the turn (none twice)."""
    return await store.db.read(
        lambda conn: [
            row[0]
            for row in conn.execute(
                "SELECT name FROM bag_files WHERE message_id = ? AND source = 'result' "
                "ORDER BY rowid",
                (start["assistantMessageId"],),
            )
        ]
    )


async def test_the_writeback_of_a_killed_replicas_turn_lands_on_the_other_replica(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    runner = await start_runner_process(
        nursery, "--data-dir", str(tmp_path / "runner-data"), token=RUNNER_TOKEN
    )
    balancer = await start_forwarder(nursery)
    data_dir = tmp_path / "chat-data"
    data_dir.mkdir()
    (data_dir / "runner-token").write_text(RUNNER_TOKEN + "\n")
    async with open_redis_server() as redis:
        flags = [
            "--no-embedded-runner",
            "--sandbox-url", runner.url,
            "--redis-url", redis.url,
            "--public-url", balancer.url,
        ]  # fmt: skip
        first = await start_serve_process(nursery, data_dir, WRITES_THEN_WAITS, *flags)
        second = await start_serve_process(nursery, data_dir, WRITES_THEN_WAITS, *flags)
        # The balancer sends every connection to the first replica while it lives.
        balancer.backends = [_hostport(first.url), _hostport(second.url)]
        token = (data_dir / "api-token").read_text().strip()
        body = {"workspaceId": WORKSPACE, "message": "write the report"}
        async with (
            first.client(token) as client,
            client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
        ):
            assert response.status_code == 200
            reader = EventReader(response)
            await reader.until(lambda e: running_step(e) and "run_shell" in e.data)
            start: dict[str, Any] = msgspec.json.decode(reader.events[0].data)
            # The sandbox's first callbacks (env, config) were served by the first
            # replica (the replicas' start-up probes found no backend: "502").
            assert _hostport(first.url) in balancer.used
            assert _hostport(second.url) not in balancer.used
            first.process.send_signal(signal.SIGKILL)
        with trio.fail_after(DEADLINE):
            await first.exited.wait()
        store = await SQLiteChatStore.open(data_dir)
        try:
            message = await settled_assistant(store, start)
            assert message.status == "complete", message
            answer = message.content[0]
            assert isinstance(answer, TextBlock)
            assert answer.text == "the report is written"
            assert [f.name for f in message.file_attachments] == ["report.md"]
            assert await _result_rows(store, start) == ["report.md"]
        finally:
            await store.close()
        # The writeback went through the balancer to the replica still alive.
        assert balancer.used[-1] == _hostport(second.url)
        async with second.client(token) as client:
            download = await client.get(
                f"/api/assistant/chats/{start['chatId']}/files/{message.file_attachments[0].id}",
                params={"workspaceId": WORKSPACE},
            )
        assert download.status_code == 200 and download.text == REPORT


async def _server_behind(
    nursery: trio.Nursery, tmp_path: Path, *container_args: str
) -> tuple[ChatServer, Any]:
    """An in-process chat server whose public URL is a forwarder in front of it."""
    balancer = await start_forwarder(nursery)
    server = await start_chat_server(
        nursery,
        tmp_path,
        public_url=balancer.url,
        container_args=container_args,
        agent=scripted(
            write("output/report.md", REPORT),
            write("output/data/table.csv", "a,b\n1,2\n"),
            shell("sleep 1"),
            message="the report is written",
        ),
    )
    balancer.backends = [_hostport(server.url)]
    return server, balancer


async def test_an_upload_whose_answer_was_lost_is_retried_and_stored_once(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server, balancer = await _server_behind(nursery, tmp_path)
    balancer.lose_response_of(b"/results HTTP/1.1")
    run = await server.turn("write the report")
    assert run.status == 200
    assert balancer.lost == 1  # the first upload was handled, its answer dropped
    [files] = run.data("files")
    assert [f["name"] for f in files["files"]] == ["report.md", "data/table.csv"]
    chat = await server.chat(run.chat_id)
    stored = chat["messages"][-1]
    assert stored["status"] == "complete"
    assert [f["name"] for f in stored["fileAttachments"]] == ["report.md", "data/table.csv"]
    assert await _result_rows(server.store, run.start) == [
        "report.md",
        "data/table.csv",
    ]


async def test_a_writeback_that_never_gets_through_keeps_the_answer_and_names_the_files(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server, balancer = await _server_behind(
        nursery, tmp_path, "--callback-retry", "1", "--retry-backoff", "0.1"
    )
    async with server.stream({"workspaceId": WORKSPACE, "message": "write"}) as response:
        reader = EventReader(response)
        await reader.until(lambda e: running_step(e) and "run_shell" in e.data)
        # From here on the public URL is dead: no replica behind the balancer.
        balancer.backends = []
        balancer.drop_connections()
        with trio.fail_after(DEADLINE):
            while await reader.next() is not None:
                pass
    run_start: dict[str, Any] = msgspec.json.decode(reader.events[0].data)
    chat = await server.chat(run_start["chatId"])
    stored = chat["messages"][-1]
    assert stored["status"] == "complete", stored
    assert stored["content"][0] == {"type": "text", "text": "the report is written"}
    [steps] = [block["steps"] for block in stored["content"] if block["type"] == "steps"]
    [write_back] = [step for step in steps if step["name"] == "write_back"]
    assert write_back["status"] == "failed"
    assert write_back["args"] == {"files": ["report.md", "data/table.csv"]}
    # The last attempt was answered 502 by the balancer, or cut as its backend went.
    assert re.match(
        r"2 file\(s\) not written back \(report\.md, data/table\.csv\): POST /results "
        r"(answered 502|failed: RemoteProtocolError)",
        write_back["error"],
    ), write_back["error"]
    assert stored.get("fileAttachments", []) == []
    assert await _result_rows(server.store, run_start) == []
    assert balancer.used.count("502") >= 2, balancer.used  # retried, then given up


async def test_callbacks_answered_502_are_retried_until_a_replica_is_behind_the_url(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server, balancer = await _server_behind(nursery, tmp_path)
    balancer.backends = []  # the balancer has no live replica yet: 502 to everything
    async with trio.open_nursery() as inner:

        async def bring_the_replica_back() -> None:
            with trio.fail_after(DEADLINE):
                while "502" not in balancer.used:
                    await trio.sleep(0.02)
            balancer.backends = [_hostport(server.url)]

        inner.start_soon(bring_the_replica_back)
        run = await server.turn("write the report")
    assert balancer.used[0] == "502"
    stored = (await server.chat(run.chat_id))["messages"][-1]
    assert stored["status"] == "complete", stored
    assert [f["name"] for f in stored["fileAttachments"]] == ["report.md", "data/table.csv"]
