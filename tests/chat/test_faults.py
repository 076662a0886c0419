"""Outages under the deployment of docs/deploy.md: two ``sandstream serve`` replicas, a
``sandstream runner``, PostgreSQL (this test's own server, stopped and started again on
its data dir and port) and Redis.

PostgreSQL stopped mid-turn, then Redis: no replica exits, ``GET /readyz`` answers 503
naming the part while it is away and 200 once it is back, the turn streams on, and it
is stored once, as the fold of its whole output. The runner killed for good: its turn
settles ``runner_lost`` within ``--runner-lost-timeout`` and the chat takes a new turn
(on a new runner). An unreachable Redis at start is one line and exit status 2.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.support.ports import free_port
from benchmarks.support.postgres_server import PostgresServer, open_postgres_server
from benchmarks.support.redis_server import open_redis_server
from benchmarks.support.runner_process import start_runner_process
from sandstream.server.chat.store import PostgresChatStore
from tests.chat.harness import (
    DEADLINE,
    RUNNER_TOKEN,
    WORKSPACE,
    EventReader,
    ServeProcess,
    descendants,
    output_message,
    runner_output,
    running_step,
    settled_assistant,
    start_serve_process,
)
from tests.server.harness import wait_until_alive
from tests.support import processes
from tests.support.container import alive, remove_run_dirs
from tests.support.forwarder import start_forwarder

TOKEN = "faults-api-token"
TURN = {
    "agent": {
        "kind": "scripted",
        "steps": [
            {
                "tool": "run_shell",
                "args": {
                    "command": "for i in $(seq 1 100); do echo line $i; sleep 0.1; done",
                    "timeout_sec": 300,
                },
            },
        ],
        "message": "counted",
    }
}
"""A turn that prints a line every 0.1 s for about 10 s (the runner's sleep 300
turn, for the runner lost, is the same shell with a longer count)."""


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test alone: it is stopped and started again."""
    with open_postgres_server() as server:
        yield server


async def _readiness(replica: ServeProcess) -> tuple[int, dict[str, Any]]:
    async with replica.client(TOKEN) as client:
        response = await client.get("/readyz")
    body: dict[str, Any] = response.json()
    return response.status_code, body


async def _until_ready(replicas: list[ServeProcess], part: str, ready: bool) -> None:
    """Poll each replica's ``/readyz`` until ``part`` is (not) ready and the status says so."""
    with trio.fail_after(DEADLINE):
        for replica in replicas:
            while True:
                status, body = await _readiness(replica)
                if body["checks"][part]["ok"] is ready and (status == 200) is ready:
                    break
                await trio.sleep(0.1)


async def _failed_calls(replicas: list[ServeProcess]) -> dict[str, float]:
    """The replicas' failed database and Redis calls, summed by store (their /metrics)."""
    failed: dict[str, float] = {"postgresql": 0.0, "redis": 0.0}
    for replica in replicas:
        async with replica.client(TOKEN) as client:
            text = (await client.get("/metrics")).text
        for family in text_string_to_metric_families(text):
            if family.name == "sandstream_store_operation_errors":
                for sample in family.samples:
                    store = sample.labels["store"]
                    failed[store] = failed.get(store, 0.0) + sample.value
    return failed


async def test_outages_are_waited_out_and_a_lost_runner_frees_its_chat(
    nursery: trio.Nursery, tmp_path: Path, own_postgres: PostgresServer
) -> None:
    url = await trio.to_thread.run_sync(own_postgres.create_database)
    runner_port = free_port()
    runner = await start_runner_process(
        nursery, "--port", str(runner_port), "--data-dir", str(tmp_path / "runner"),
        token=RUNNER_TOKEN,
    )  # fmt: skip
    balancer = await start_forwarder(nursery)
    dirs = [tmp_path / "replica-1", tmp_path / "replica-2"]
    for data_dir in dirs:
        data_dir.mkdir()
        (data_dir / "runner-token").write_text(RUNNER_TOKEN + "\n")
        (data_dir / "api-token").write_text(TOKEN + "\n")
    async with open_redis_server() as redis:
        flags = [
            "--no-embedded-runner",
            "--sandbox-url", runner.url,
            "--redis-url", redis.url,
            "--public-url", balancer.url,
            "--database-url", url,
            "--sweep-interval", "0.5",
            "--runner-lost-timeout", "3",
        ]  # fmt: skip
        replicas = [await start_serve_process(nursery, d, TURN, *flags) for d in dirs]
        balancer.backends = [r.url.removeprefix("http://").rstrip("/") for r in replicas]
        await _until_ready(replicas, "database", True)

        async def outage(stop: Any, start: Any, part: str) -> None:
            """A turn during which ``part`` is stopped, then started again."""
            body = {"workspaceId": WORKSPACE, "message": f"count through a {part} outage"}
            async with (
                replicas[0].client(TOKEN) as client,
                client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
            ):
                assert response.status_code == 200
                reader = EventReader(response)
                await reader.until(lambda e: running_step(e) and "run_shell" in e.data)
                turn_start: dict[str, Any] = msgspec.json.decode(reader.events[0].data)
                await stop()
                await _until_ready(replicas, part, False)
                # The turn streams on to its end meanwhile (its files are read later).
                while (event := await reader.next()) is not None and event.event != "done":
                    pass
                assert [e.event for e in reader.events][-2:] == ["result", "done"], [
                    (e.event, e.data[:80]) for e in reader.events[-5:]
                ]
                await start()
                await _until_ready(replicas, part, True)
            assert all(not r.exited.is_set() for r in replicas)
            store = await PostgresChatStore.open(url)
            try:
                message = await settled_assistant(store, turn_start)
                output = await runner_output(runner.url, turn_start["sessionId"])
                stored = msgspec.structs.replace(message, file_attachments=[])
                assert msgspec.json.encode(stored) == msgspec.json.encode(
                    output_message(output, message)
                )
                assert message.status == "complete"
                messages = await store.get_messages(WORKSPACE, turn_start["chatId"])
                assert [m.role for m in messages] == ["user", "assistant"]  # stored once
                chat = await store.get_chat(WORKSPACE, turn_start["chatId"], now=0)
                assert chat.active_message_id is None
            finally:
                await store.close()

        await outage(
            lambda: trio.to_thread.run_sync(own_postgres.stop),
            lambda: trio.to_thread.run_sync(own_postgres.start),
            "database",
        )
        await outage(redis.stop, lambda: redis.start(DEADLINE), "redis")
        # Both outages were visible to an operator: calls that failed, by store.
        failed = await _failed_calls(replicas)
        assert failed["postgresql"] > 0 and failed["redis"] > 0, failed
        await _a_lost_runner_frees_its_chat(nursery, tmp_path, replicas, runner, runner_port, url)
        for replica in replicas:
            replica.process.send_signal(signal.SIGTERM)
            with trio.fail_after(DEADLINE):
                await replica.exited.wait()


async def _a_lost_runner_frees_its_chat(
    nursery: trio.Nursery,
    tmp_path: Path,
    replicas: list[ServeProcess],
    runner: Any,
    runner_port: int,
    url: str,
) -> None:
    body = {"workspaceId": WORKSPACE, "message": "count, then the runner is gone"}
    async with replicas[0].client(TOKEN) as client:
        async with client.stream("POST", "/api/assistant/chat/stream", json=body) as response:
            reader = EventReader(response)
            await reader.until(lambda e: running_step(e) and "run_shell" in e.data)
            turn_start: dict[str, Any] = msgspec.json.decode(reader.events[0].data)
            await wait_until_alive(runner.pid, "sleep 0.1")
            orphans = descendants(runner.pid)
            runner.process.send_signal(signal.SIGKILL)
            processes.kill(orphans)  # nobody reaps a SIGKILLed runner's containers
        await _until_ready(replicas, "runner", False)
        store = await PostgresChatStore.open(url)
        try:
            message = await settled_assistant(store, turn_start)  # no runner came back
        finally:
            await store.close()
        assert message.status == "failed"
        content = msgspec.to_builtins(message)["content"]
        assert content[-1]["code"] == "runner_lost"
        assert any(block["type"] == "steps" for block in content)  # what was moved is kept
        with trio.fail_after(DEADLINE):
            while alive(orphans):
                await trio.sleep(0.05)
        assert remove_run_dirs() == []
        # The chat is free: a new turn on it runs (on a new runner at the same address).
        await start_runner_process(
            nursery, "--port", str(runner_port), "--data-dir", str(tmp_path / "runner-2"),
            token=RUNNER_TOKEN,
        )  # fmt: skip
        again = {**body, "chatId": turn_start["chatId"], "message": "count again"}
        async with client.stream("POST", "/api/assistant/chat/stream", json=again) as response:
            assert response.status_code == 200
            reader = EventReader(response)
            await reader.until(lambda e: e.event == "done")
        assert [e.event for e in reader.events][-2:] == ["result", "done"]


async def test_an_unreachable_redis_at_start_is_one_line_and_exit_2(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    result = await trio.run_process(
        [sys.executable, "-m", "sandstream.server.cli", "serve", "--port", "0",
         "--data-dir", str(tmp_path), "--redis-url", f"redis://127.0.0.1:{port}/0",
         "--public-url", "http://127.0.0.1:9"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sandstream serve: Redis cannot be used:")
