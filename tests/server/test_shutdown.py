"""Server shutdown: every running turn ends with error{code:"shutdown"}, every container reaped."""

from __future__ import annotations

import os

import trio

from benchmarks.support.workspace import WorkspaceServer, start_workspace
from sandstream.server import LocalContainer, LocalSubprocessLauncher
from tests.server.harness import (
    Reader,
    descendants,
    load,
    marked,
    parse_stream,
    scripted,
    settings,
    shell,
    start_runner,
    wait_gone,
    wait_until_alive,
)
from tests.server.test_cancellation import _raw_post
from tests.support import processes


async def test_shutdown_ends_live_streams_and_reaps_every_container(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    served = trio.Event()  # held until the draining server was looked at
    server = await start_runner(nursery, hold_drain=served)
    loader = await start_workspace(nursery, config=load(10_000_000, rate=1000))
    workspace.config = scripted(shell("sleep 308 & sleep 309; wait"))
    dispatches = [workspace.mint_dispatch(), workspace.mint_dispatch(), loader.mint_dispatch()]
    bodies: dict[int, bytes] = {}
    started = 0
    all_started = trio.Event()

    async def client(index: int) -> None:
        nonlocal started
        async with server.stream(dispatches[index]) as response:
            assert response.status_code == 200
            reader = Reader(response)
            await reader.lines(2)
            started += 1
            if started == len(dispatches):
                all_started.set()
            bodies[index] = await reader.rest()

    async with trio.open_nursery() as clients:
        for index in range(len(dispatches)):
            clients.start_soon(client, index)
        with trio.fail_after(60):
            await all_started.wait()
            while len(server.runner.turns()) < 3 or any(
                turn.container is None for turn in server.runner.turns()
            ):
                await trio.sleep(0.01)
        with trio.fail_after(30):  # both tool turns are inside their long tool
            while len(await wait_until_alive(os.getpid(), "sleep 309")) < 2:
                await trio.sleep(0.01)
        pids: list[int] = []
        for turn in server.runner.turns():
            assert isinstance(turn.container, LocalContainer)
            pids += [turn.container.pid, *descendants(turn.container.pid)]
        assert len(pids) >= 3 + 2 * 2  # containers; skill and sleeps of the two tools

        clients.start_soon(server.shutdown)
        # While it drains, new turns are refused with 503 and Retry-After.
        with trio.fail_after(10):
            while not server.runner.draining:
                await trio.sleep(0.001)
        async with server.client() as late:
            refused = await late.post("/stream", json=workspace.mint_dispatch())
            health = await late.get("/healthz")
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "5"
        assert refused.json()["type"] == "urn:sandstream:problem:shutting-down"
        assert health.status_code == 503
        served.set()

    for index in range(len(dispatches)):
        lines = parse_stream(bodies[index])
        assert lines[-1]["type"] == "error"
        assert lines[-1]["code"] == "shutdown"
    records = await server.wait_records(3)
    assert sorted(record.outcome for record in records) == ["shutdown"] * 3
    assert server.runner.live == 0
    await wait_gone(None, pids, timeout=5)
    assert marked([record.turn_id for record in records]) == []


async def test_shutdown_with_a_client_that_stopped_reading_stops_its_container_at_once(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    server = await start_runner(
        nursery,
        # Only shutdown may end this turn, and it must not wait out its own timeout.
        runner_settings=settings(stall_timeout=None, shutdown_timeout=120.0),
        # A container left to wait out the grace would outlive the test.
        launcher=LocalSubprocessLauncher(stderr="discard", kill_grace=300.0),
    )
    workspace.config = load(50_000_000, payload_bytes=1000)
    stream = await _raw_post(server.url, workspace.mint_dispatch())
    try:
        turn, container = await server.wait_container()
        # Never read. Wait until the whole chain is stuck: the container blocks on its
        # full pipe and the turn hands out nothing more.
        with trio.fail_after(60):
            still, sent = 0, -1
            while still < 3:
                await trio.sleep(0.1)
                stuck = processes.blocked_writing(container.pid) and turn.bytes == sent
                still = still + 1 if stuck else 0
                sent = turn.bytes
        await server.shutdown()
        # By the time shutdown returned the container was gone, stopped by SIGTERM
        # (its pipe drained) rather than killed after the 300 s grace.
        assert container.exit is not None and not container.exit.escalated
        assert marked([turn.id]) == []
        (record,) = server.records
        assert (record.outcome, record.terminal) == ("shutdown", "shutdown")
        assert server.runner.live == 0
    finally:
        await stream.aclose()
