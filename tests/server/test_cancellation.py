"""Every way a turn ends early tears down the container and everything it started.

Real Hypercorn, real httpx (HTTP/1.1), real containers running the scripted agent
and its skills. Process checks poll psutil under a deadline.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import Any
from urllib.parse import urlsplit

import msgspec
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.server import LocalSubprocessLauncher
from tests.server.harness import (
    AUTH,
    Reader,
    RunnerServer,
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
from tests.support.container import remove_run_dirs


async def _assert_no_leftovers(server: RunnerServer) -> None:
    turn_ids = [record.turn_id for record in server.records]
    with trio.move_on_after(10):
        while marked(turn_ids):
            await trio.sleep(0.01)
    assert marked(turn_ids) == []
    assert server.runner.live == 0
    assert server.runner.turns() == []


async def test_disconnect_before_the_first_line(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    workspace.hang = {"env"}  # the container blocks in bootstrap, before any line
    async with server.stream(workspace.mint_dispatch()) as response:
        assert response.status_code == 200
        _, container = await server.wait_container()
        await wait_until_alive(os.getpid(), "sandstream.container")
        pids = [container.pid, *descendants(container.pid)]
    # leaving the block closes the connection: a client disconnect
    await wait_gone(container.pgid, pids)
    (record,) = await server.wait_records(1)
    assert record.outcome == "client_disconnected"
    assert record.terminal is None
    assert record.lines == 0
    assert record.teardown_ms is not None
    assert not workspace.redeemed("results")
    await _assert_no_leftovers(server)


async def test_disconnect_mid_stream(server: RunnerServer, workspace: WorkspaceServer) -> None:
    workspace.config = load(1_000_000, rate=2000)
    dispatch = workspace.mint_dispatch()
    async with (
        server.client() as client,
        client.stream("POST", "/stream", json=dispatch) as response,
    ):
        reader = Reader(response)  # keep it: a dropped byte iterator closes the response
        lines = await reader.lines(50)
        assert len(lines) == 50
        _, container = await server.wait_container()
        pids = [container.pid, *descendants(container.pid)]
    await wait_gone(container.pgid, pids)
    (record,) = await server.wait_records(1)
    assert record.outcome == "client_disconnected"
    assert record.lines >= 50
    await _assert_no_leftovers(server)


async def test_disconnect_during_a_long_tool_kills_its_grandchildren(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    workspace.config = scripted(shell("sleep 301 & sleep 302; wait"))
    dispatch = workspace.mint_dispatch()
    async with (
        server.client() as client,
        client.stream("POST", "/stream", json=dispatch) as response,
    ):
        reader = Reader(response)
        await reader.until(lambda line: line.get("status") == "running")
        _, container = await server.wait_container()
        await wait_until_alive(container.pid, "sleep 302")
        await wait_until_alive(container.pid, "sleep 301")
        pids = [container.pid, *descendants(container.pid)]
        assert len(pids) >= 5  # container, skill, bash, two sleeps
    await wait_gone(container.pgid, pids)
    (record,) = await server.wait_records(1)
    assert record.outcome == "client_disconnected"
    await _assert_no_leftovers(server)


async def test_container_killed_from_outside_ends_with_a_terminal_line(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    workspace.config = scripted(shell("sleep 303"))
    dispatch = workspace.mint_dispatch()
    async with (
        server.client() as client,
        client.stream("POST", "/stream", json=dispatch) as response,
    ):
        reader = Reader(response)
        await reader.until(lambda line: line.get("status") == "running")
        _, container = await server.wait_container()
        await wait_until_alive(container.pid, "sleep 303")
        pids = [container.pid, *descendants(container.pid)]
        os.kill(container.pid, signal.SIGKILL)
        body = await reader.rest()
    lines = parse_stream(body)
    assert lines[-1]["type"] == "error"
    assert lines[-1]["code"] == "upstream_closed"
    assert "SIGKILL" in lines[-1]["message"]
    # The tool ran in a session of its own, so the group kill could not reach it:
    # the sweep found it by the turn's environment marker.
    await wait_gone(container.pgid, pids)
    (record,) = await server.wait_records(1)
    assert record.outcome == "container_exited"
    assert record.returncode == -signal.SIGKILL
    assert record.stragglers >= 1
    await _assert_no_leftovers(server)
    # It left its run and state dirs in its own TMPDIR, which the launcher removed.
    assert remove_run_dirs() == []


async def test_runtime_cap(nursery: trio.Nursery, workspace: WorkspaceServer) -> None:
    server = await start_runner(nursery, runner_settings=settings(runtime_cap=2.0))
    workspace.config = scripted(shell("sleep 304"))
    async with server.client() as client:
        response = await client.post("/stream", json=workspace.mint_dispatch())
    lines = parse_stream(response.content)
    assert lines[-1]["type"] == "error"
    assert lines[-1]["code"] == "runtime_exceeded"
    (record,) = await server.wait_records(1)
    assert record.outcome == "runtime_exceeded"
    assert record.terminal == "runtime_exceeded"
    assert record.duration_ms >= 2000
    await _assert_no_leftovers(server)


async def test_a_client_that_stops_reading_is_cut_off(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    server = await start_runner(nursery, runner_settings=settings(stall_timeout=1.0))
    workspace.config = load(50_000_000, payload_bytes=1000)
    stream = await _raw_post(server.url, workspace.mint_dispatch())
    try:
        # The client never reads: buffers fill, the server's write blocks for good.
        (record,) = await server.wait_records(1, timeout=60)
        assert record.outcome == "stalled"
        assert record.terminal == "stalled"
        assert record.container is not None
        await _assert_no_leftovers(server)
        # The blocked write was freed by cutting the connection: the client sees it end.
        with trio.fail_after(10):
            while await _receive_or_reset(stream):
                pass
    finally:
        await stream.aclose()


async def test_a_container_ignoring_sigterm_is_killed_after_the_grace(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    # The leader (a shell) ignores SIGTERM and outlives the real container it runs.
    wrapper = f"trap '' TERM; {sys.executable} -m sandstream.container; sleep 305"
    launcher = LocalSubprocessLauncher(argv=["sh", "-c", wrapper], kill_grace=0.5, stderr="discard")
    server = await start_runner(nursery, launcher=launcher)
    workspace.config = scripted(shell("sleep 306"))
    dispatch = workspace.mint_dispatch()
    async with (
        server.client() as client,
        client.stream("POST", "/stream", json=dispatch) as response,
    ):
        reader = Reader(response)
        await reader.lines(1)
        _, container = await server.wait_container()
        await wait_until_alive(container.pid, "sleep 306")
        pids = [container.pid, *descendants(container.pid)]
    await wait_gone(container.pgid, pids)
    (record,) = await server.wait_records(1)
    assert record.outcome == "client_disconnected"
    assert record.escalated
    assert record.teardown_ms is not None and record.teardown_ms >= 500
    await _assert_no_leftovers(server)


async def test_a_container_that_cannot_start(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    launcher = LocalSubprocessLauncher(argv=["/nonexistent/sandstream-container"])
    server = await start_runner(nursery, launcher=launcher)
    async with server.client() as client:
        response = await client.post("/stream", json=workspace.mint_dispatch())
    assert response.status_code == 200
    (line,) = parse_stream(response.content)
    assert line["code"] == "launch_failed"
    (record,) = await server.wait_records(1)
    assert record.outcome == "launch_failed"
    assert record.container is None
    assert server.runner.live == 0


async def test_a_container_that_closes_stdout_but_keeps_running(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    # The real container runs and exits; the wrapper then closes stdout and lingers.
    wrapper = f"{sys.executable} -m sandstream.container; exec >&-; sleep 307"
    launcher = LocalSubprocessLauncher(argv=["sh", "-c", wrapper], stderr="discard")
    server = await start_runner(
        nursery, runner_settings=settings(settle_timeout=0.5), launcher=launcher
    )
    async with server.client() as client:
        response = await client.post("/stream", json=workspace.mint_dispatch())
    assert parse_stream(response.content)[-1]["type"] == "result"
    (record,) = await server.wait_records(1)
    assert record.outcome == "result"
    assert record.teardown_ms is not None  # it had to be stopped
    await _assert_no_leftovers(server)


# -- helpers --------------------------------------------------------------------


async def _raw_post(url: str, dispatch: dict[str, Any]) -> trio.SocketStream:
    """Send POST /stream on a raw socket with a tiny receive buffer, and never read."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect((parts.hostname, parts.port))
    stream = trio.SocketStream(sock)
    body = msgspec.json.encode(dispatch)
    head = (
        f"POST /stream HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Authorization: {AUTH['Authorization']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    await stream.send_all(head.encode() + body)
    return stream


async def _receive_or_reset(stream: trio.SocketStream) -> bool:
    """Read and drop data; False at EOF or reset."""
    try:
        return bool(await stream.receive_some(1 << 20))
    except trio.BrokenResourceError:
        return False
