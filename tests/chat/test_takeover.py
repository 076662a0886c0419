"""Two ``sandstream serve`` replicas on one chat database and a remote runner: the
replica that moves a running turn's session dies (SIGKILL) or stalls (SIGSTOP), the
other takes it over under the log mover's lease (Redis, or the SQLite default), and
the stored assistant message is what the session's full output folds to (with
``--keep-chunks``, the copy of the chunks is the session's output, every chunk once;
without, there is no copy). The same holds when Redis is restarted mid-turn (it loses
every lease) or tampered with (owner keys deleted, every generation counter at
2^63-1): the turn settles and its chat takes the next turn."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from benchmarks.support.redis_server import RedisServer, open_redis_server
from benchmarks.support.runner_process import start_runner_process
from sandstream.server.chat import SqlChatStore
from sandstream.server.chat.mover.lease import redis_keys
from sandstream.server.chat.mover.redis_client import open_redis
from tests.chat.databases import open_store
from tests.chat.harness import (
    DEADLINE,
    RUNNER_TOKEN,
    WORKSPACE,
    EventReader,
    ServeProcess,
    lease_holder,
    output_message,
    runner_output,
    runner_position,
    running_step,
    settled_assistant,
    start_serve_process,
)
from tests.support.forwarder import start_forwarder

pytestmark = pytest.mark.usefixtures("chat_database")

COUNTING = {
    "agent": {
        "kind": "scripted",
        "steps": [
            {
                "tool": "run_shell",
                "args": {
                    "command": "for i in $(seq 1 60); do echo line $i; sleep 0.1; done",
                    "timeout_sec": 300,
                },
            }
        ],
        "message": "counted",
    }
}
"""A turn of about 6 s whose tool prints a line every 0.1 s: chunks keep coming."""


@asynccontextmanager
async def _lease_flags(kind: str) -> AsyncIterator[list[str]]:
    """The serve flags of the lease ``kind``: a real redis-server, or none (SQLite)."""
    if kind == "sqlite":
        yield []
        return
    async with open_redis_server() as redis:
        yield ["--redis-url", redis.url]


async def _replicas(
    nursery: trio.Nursery, tmp_path: Path, lease: list[str]
) -> tuple[str, ServeProcess, ServeProcess, Path]:
    """A runner process and two serve replicas without an embedded runner, sharing its
    token and one data dir (the chat database), behind one public URL (a forwarder);
    ``lease``: more serve flags (the lease's, ``--keep-chunks``)."""
    runner = await start_runner_process(
        nursery, "--data-dir", str(tmp_path / "runner-data"), token=RUNNER_TOKEN
    )
    balancer = await start_forwarder(nursery)
    data_dir = tmp_path / "chat-data"
    data_dir.mkdir()
    (data_dir / "runner-token").write_text(RUNNER_TOKEN + "\n")
    flags = ["--no-embedded-runner", "--sandbox-url", runner.url, "--lease-ttl", "2", *lease]
    # No workspace snapshots: a stopped replica would hold the sandbox's saving callbacks
    # that land on it for the callback timeout, and these tests are about the log mover.
    flags += ["--public-url", balancer.url, "--snapshot-max-bytes", "0"]
    first = await start_serve_process(nursery, data_dir, COUNTING, *flags)
    second = await start_serve_process(nursery, data_dir, COUNTING, *flags)
    balancer.backends = [u.removeprefix("http://").rstrip("/") for u in (first.url, second.url)]
    return runner.url, first, second, data_dir


async def _wait_claimed(store: SqlChatStore, session_id: str) -> None:
    """Wait until a replica claimed the session (it raised the session's fence)."""
    with trio.fail_after(DEADLINE):
        while await store.moved_chunks.generation(session_id) == 0:
            await trio.sleep(0.02)


async def _start_turn(replica: ServeProcess, token: str) -> dict[str, Any]:
    """Start a turn on ``replica``, read until its tool runs, then leave (it goes on)."""
    body = {"workspaceId": WORKSPACE, "message": "count"}
    async with (
        replica.client(token) as client,
        client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
    ):
        assert response.status_code == 200
        reader = EventReader(response)
        await reader.until(running_step)
        start: dict[str, Any] = msgspec.json.decode(reader.events[0].data)
        return start


async def _assert_stored_equals_the_session(
    store: SqlChatStore, runner_url: str, start: dict[str, Any], *, kept: bool = False
) -> list[bytes]:
    """Wait until the turn settled; check it against the runner's output (returned).
    ``kept``: the replicas keep a copy of the chunks."""
    message = await settled_assistant(store, start)
    session_id = start["sessionId"]
    output = await runner_output(runner_url, session_id)
    # Every chunk copied once, in order (none lost, none twice), or none at all.
    assert await store.moved_chunks.read(session_id) == (output if kept else [])
    expected = output_message(output, message)
    assert msgspec.json.encode(message) == msgspec.json.encode(expected)
    assert message.status == "complete"
    text = b"".join(output).decode()
    assert "line 60" in text and '"type":"result"' in text
    return output


@pytest.mark.parametrize(("lease", "kept"), [("redis", False), ("sqlite", False), ("sqlite", True)])
async def test_a_killed_replicas_turn_is_taken_over_and_stored_whole(
    nursery: trio.Nursery, tmp_path: Path, lease: str, kept: bool
) -> None:
    async with _lease_flags(lease) as flags:
        flags += ["--keep-chunks"] if kept else []
        runner_url, first, second, data_dir = await _replicas(nursery, tmp_path, flags)
        token = (data_dir / "api-token").read_text().strip()
        start = await _start_turn(first, token)
        store = await open_store(data_dir)
        try:
            sink = store.moved_chunks
            await _wait_claimed(store, start["sessionId"])
            owner, other = await lease_holder((first, second), token)
            assert await sink.generation(start["sessionId"]) == 1
            owner.process.send_signal(signal.SIGKILL)
            with trio.fail_after(DEADLINE):
                await owner.exited.wait()
            position = await runner_position(runner_url, start["sessionId"])
            output = await _assert_stored_equals_the_session(store, runner_url, start, kept=kept)
            assert position < len(output)  # the second replica moved the rest
            # The second replica claimed it under a newer generation, then settled it.
            assert await sink.generation(start["sessionId"]) >= 2
            chat = await store.get_chat(WORKSPACE, start["chatId"], now=0)
            assert chat.active_message_id is None  # the lock was released
        finally:
            await store.close()
        # The chat takes the next turn on the surviving replica.
        async with other.client(token) as client:
            body = {"workspaceId": WORKSPACE, "chatId": start["chatId"], "message": "again"}
            async with client.stream("POST", "/api/assistant/chat/stream", json=body) as response:
                assert response.status_code == 200
                await response.aread()
        other.process.send_signal(signal.SIGTERM)
        with trio.fail_after(DEADLINE):
            await other.exited.wait()


async def test_a_stalled_replica_that_lost_its_lease_writes_nothing_when_it_wakes(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    async with _lease_flags("redis") as flags:
        runner_url, first, second, data_dir = await _replicas(nursery, tmp_path, flags)
        token = (data_dir / "api-token").read_text().strip()
        start = await _start_turn(first, token)
        session_id = start["sessionId"]
        store = await open_store(data_dir)
        try:
            sink = store.moved_chunks
            await _wait_claimed(store, session_id)
            owner, _ = await lease_holder((first, second), token)
            owner.process.send_signal(signal.SIGSTOP)  # a long pause, a partition
            try:
                await _assert_stored_equals_the_session(store, runner_url, start)
                stored = await store.get_messages(WORKSPACE, start["chatId"])
                moved = await sink.read(session_id)
            finally:
                owner.process.send_signal(signal.SIGCONT)
            # Woken up, the owner notices it lost the lease and stops.
            with trio.fail_after(DEADLINE):
                while not any(
                    session_id in line
                    and any(word in line for word in ("lost", "stopped moving", "no renewal"))
                    for line in owner.stderr
                ):
                    await trio.sleep(0.05)
            assert await sink.read(session_id) == moved
            assert await store.get_messages(WORKSPACE, start["chatId"]) == stored
        finally:
            await store.close()
        for replica in (first, second):
            replica.process.send_signal(signal.SIGTERM)
            with trio.fail_after(DEADLINE):
                await replica.exited.wait()


async def _tamper(redis: RedisServer) -> None:
    """What code in a sandbox that reached Redis did: every lease owner key deleted,
    every generation counter set to 2^63-1 (the next INCR overflows)."""
    async with open_redis(redis.url) as (client, _):
        owners = [key async for key in client.scan_iter(match="sandbox:*:owner")]
        counters = [key async for key in client.scan_iter(match="sandbox:*:generation")]
        assert owners and counters
        await client.delete(owners)
        for counter in counters:
            await client.set(counter, str(2**63 - 1))


@pytest.mark.parametrize(
    "trouble",
    [RedisServer.restart, _tamper],  # a restart comes back empty: every lease is gone
    ids=["restarted", "tampered"],
)
async def test_a_turn_settles_and_its_chat_unlocks_whatever_redis_loses_or_holds(
    nursery: trio.Nursery, tmp_path: Path, trouble: Any
) -> None:
    async with open_redis_server() as redis:
        runner_url, first, second, data_dir = await _replicas(
            nursery, tmp_path, ["--redis-url", redis.url]
        )
        token = (data_dir / "api-token").read_text().strip()
        start = await _start_turn(first, token)
        session_id = start["sessionId"]
        store = await open_store(data_dir)
        try:
            sink = store.moved_chunks
            await _wait_claimed(store, session_id)  # moving under the first claim
            await trouble(redis)
            # The turn settles: the message folded from every chunk once (compared
            # with the runner's), the lock released.
            await _assert_stored_equals_the_session(store, runner_url, start)
            chat = await store.get_chat(WORKSPACE, start["chatId"], now=0)
            assert chat.active_message_id is None
            # It was claimed again above the fence, and Redis holds that claim's
            # generation: the lease was re-established there.
            generation = await sink.generation(session_id)
            assert generation >= 2
            async with open_redis(redis.url) as (client, _):
                counter = await client.get(redis_keys(session_id)[1])
            assert counter == b"%d" % generation
        finally:
            await store.close()
        # The chat takes the next turn.
        async with second.client(token) as client:
            body = {"workspaceId": WORKSPACE, "chatId": start["chatId"], "message": "again"}
            async with client.stream("POST", "/api/assistant/chat/stream", json=body) as response:
                assert response.status_code == 200
                await response.aread()
        for replica in (first, second):
            replica.process.send_signal(signal.SIGTERM)
            with trio.fail_after(DEADLINE):
                await replica.exited.wait()
            assert replica.process.returncode == 0
