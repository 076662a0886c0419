"""The warm pool: sandboxes started ahead of turns, each claimed by one turn.

Real runner on loopback, the real container, the local launcher and real bwrap (on the
isolated network, its pasta started at the claim). A warm turn must give what a cold
one gives (envelope, files written back, the turn's marker in what it runs); a claimed
sandbox serves one turn; the pool refills, recycles after its TTL, and leaves nothing
behind on shutdown; a turn that finds it empty starts cold.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import tempfile
from collections.abc import Callable
from typing import Any

import httpx
import msgspec
import psutil
import pytest
import trio

from benchmarks.support.runner_process import start_runner_process
from benchmarks.support.workspace import WorkspaceServer
from sandstream.server import ContainerLauncher, LocalSubprocessLauncher, Runner
from sandstream.server.http.auth import TOKEN_ENV
from sandstream.server.runner.bwrap import BwrapContainer
from sandstream.server.runner.pool import WarmPool
from tests.server.harness import (
    AUTH,
    Reader,
    RunnerServer,
    bwrap_launcher,
    parse_stream,
    scripted,
    settings,
    shell,
    start_runner,
)
from tests.support.container import alive, namespace_members

LAUNCHERS: dict[str, Callable[[], ContainerLauncher]] = {
    "local": lambda: LocalSubprocessLauncher(stderr="discard"),
    "bwrap": lambda: bwrap_launcher(network="isolated"),
}

MARK = (
    'echo "turn=$SANDSTREAM_TURN_ID"; '
    'echo "$SANDSTREAM_TURN_ID" > "$SANDSTREAM_OUTPUT_DIR/turn.txt"; '
    'if [ -e "$TMPDIR/left-behind" ]; then echo dirty; else echo clean; fi; '
    'touch "$TMPDIR/left-behind"'
)
"""What each turn runs: its marker out and written back, and whether a turn before it
left a file in its temp dir (a sandbox that served a turn before)."""


async def _pool_runner(
    nursery: trio.Nursery, launcher: str, *, size: int = 1, ttl: float = 600.0
) -> tuple[RunnerServer, WarmPool]:
    server = await start_runner(
        nursery,
        runner_settings=settings(warm_pool=size, warm_ttl=ttl),
        launcher=LAUNCHERS[launcher](),
    )
    pool = server.runner.pool
    assert pool is not None
    return server, pool


async def _until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.01)


async def _turn(server: RunnerServer, workspace: WorkspaceServer) -> list[dict[str, Any]]:
    workspace.uploads.clear()
    async with server.stream(workspace.mint_dispatch("hi")) as response:
        assert response.status_code == 200
        body = await Reader(response).rest()
    return parse_stream(body)


def _shape(lines: list[dict[str, Any]], turn_id: str) -> list[tuple[str, str]]:
    """The envelope without what differs between any two turns (times, ids)."""
    shaped = []
    for line in lines:
        text = str(line.get("result") or line.get("message") or line.get("status") or "")
        shaped.append((line["type"], text.replace(turn_id, "TURN")))
    return shaped


def _warm_pids(pool: WarmPool) -> list[int]:
    """The processes of every unclaimed sandbox of ``pool``, with their descendants."""
    pids = []
    for _, handle in pool.ready():
        pid = int(handle.id.split(":")[1])
        pids.append(pid)
        with contextlib.suppress(psutil.NoSuchProcess):
            pids += [child.pid for child in psutil.Process(pid).children(recursive=True)]
    return pids


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
async def test_a_warm_turn_gives_what_a_cold_one_gives_and_is_never_reused(
    nursery: trio.Nursery, workspace: WorkspaceServer, launcher: str
) -> None:
    workspace.config = scripted(shell(MARK))
    cold = await start_runner(nursery, launcher=LAUNCHERS[launcher]())
    cold_lines = await _turn(cold, workspace)
    cold_files = [(u.path, u.content) for u in workspace.uploads]
    cold_id = (await cold.wait_records(1))[0].turn_id

    server, pool = await _pool_runner(nursery, launcher)
    shapes = []
    containers = []
    for index in range(2):
        await _until(lambda: pool.warm == 1)
        lines = await _turn(server, workspace)
        record = (await server.wait_records(index + 1))[index]
        assert record.outcome == "result"
        assert [(u.path, u.content) for u in workspace.uploads] == [
            ("turn.txt", f"{record.turn_id}\n".encode())
        ]
        shapes.append(_shape(lines, record.turn_id))
        containers.append(record.container)
    assert pool.claimed == 2 and pool.misses == 0
    assert cold_files == [("turn.txt", f"{cold_id}\n".encode())]
    # the same envelope as the cold turn's, the turn's marker in what it ran, and a
    # clean temp dir each time: the second turn got a sandbox of its own
    assert shapes == [_shape(cold_lines, cold_id)] * 2
    assert any("turn=TURN" in text and "clean" in text for _, text in shapes[0])
    assert containers[0] != containers[1]
    await server.shutdown()
    await cold.shutdown()


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
async def test_a_client_that_leaves_ends_its_warm_sandbox(
    nursery: trio.Nursery, workspace: WorkspaceServer, launcher: str
) -> None:
    workspace.config = scripted(shell("echo started; sleep 600", timeout_sec=600))
    server, pool = await _pool_runner(nursery, launcher)
    await _until(lambda: pool.warm == 1)
    pids = _warm_pids(pool)
    async with server.stream(workspace.mint_dispatch()) as response:
        reader = Reader(response)
        await reader.until(lambda line: line["type"] == "step" and line["status"] == "running")
    record = (await server.wait_records(1))[0]
    assert record.outcome == "client_disconnected" and pool.claimed == 1
    assert alive(pids) == []
    await server.shutdown()


async def test_the_pool_refills_and_recycles_after_its_ttl(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    workspace.config = scripted(message="done")
    server, pool = await _pool_runner(nursery, "local", ttl=0.5)
    await _until(lambda: pool.recycled >= 1)  # the first one waited out its TTL
    await _until(lambda: pool.warm == 1)
    first = _warm_pids(pool)
    await _until(lambda: pool.recycled >= 2)
    await _until(lambda: alive(first) == [])  # recycled: ended, not kept
    await _until(lambda: pool.warm == 1 and pool.started >= 3)  # and replaced
    assert pool.failed == 0 and pool.claimed == 0
    await server.shutdown()


async def test_a_claimed_sandbox_is_replaced(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    workspace.config = scripted(message="done")
    server, pool = await _pool_runner(nursery, "bwrap")
    await _until(lambda: pool.warm == 1)
    assert (await _turn(server, workspace))[-1]["type"] == "result"
    await _until(lambda: pool.warm == 1 and pool.started == 2)
    assert pool.claimed == 1 and pool.in_use == 0
    await server.shutdown()


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
async def test_shutdown_leaves_no_warm_process_or_temp_dir(
    nursery: trio.Nursery, launcher: str
) -> None:
    server, pool = await _pool_runner(nursery, launcher, size=2)
    await _until(lambda: pool.warm == 2)
    pids = _warm_pids(pool)
    # held open, a namespace's inode is not reused by another sandbox meanwhile
    held = [
        os.open(f"/proc/{handle.init_pid}/ns/pid", os.O_RDONLY)
        for _, handle in pool.ready()
        if isinstance(handle, BwrapContainer)
    ]
    assert len(held) == (2 if launcher == "bwrap" else 0)
    tmpdirs = [os.path.join(tempfile.gettempdir(), f"sandstream-{id_}-") for id_, _ in pool.ready()]
    try:
        await server.shutdown()
        assert pool.warm == 0 and alive(pids) == []
        assert [namespace_members(os.fstat(fd).st_ino) for fd in held] == [[]] * len(held)
    finally:
        for fd in held:
            os.close(fd)
    assert [path for prefix in tmpdirs for path in glob.glob(prefix + "*")] == []


async def test_a_turn_that_finds_the_pool_empty_starts_cold(
    workspace: WorkspaceServer,
) -> None:
    """A runner whose pool never ran (no app lifespan started it): every turn misses."""
    workspace.config = scripted(message="cold: {prompt}")
    runner = Runner(settings(warm_pool=1), LocalSubprocessLauncher(stderr="discard"))
    assert runner.pool is not None
    turn = runner.open_turn(msgspec.json.encode(workspace.mint_dispatch("hi")))
    body = b""
    async with turn:
        async for chunk in turn:
            body += chunk
    assert parse_stream(body)[-1]["message"] == "cold: hi"
    assert runner.pool.misses == 1 and runner.pool.claimed == 0
    await runner.shutdown()


async def test_metrics_show_the_pool(nursery: trio.Nursery) -> None:
    server, pool = await _pool_runner(nursery, "local")
    await _until(lambda: pool.warm == 1)
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
        text = (await client.get("/metrics")).text
    assert 'sandstream_warm_sandboxes{state="warm"} 1.0' in text
    for name in ("started", "claims", "misses", "recycled", "failures"):
        assert f"sandstream_warm_{name}_total" in text
    await server.shutdown()


async def test_a_custom_command_gets_no_pool() -> None:
    runner = Runner(settings(warm_pool=2), LocalSubprocessLauncher(argv=("cat",)))
    assert runner.pool is None


async def test_a_claim_that_cannot_be_bound_ends_its_sandbox_and_starts_cold(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    """A sealed sandbox reaches only this host: a callback elsewhere fails its bind (no
    pasta can forward it), the warm sandbox is ended, and the cold start that follows
    fails as a cold one does."""
    server = await start_runner(
        nursery,
        runner_settings=settings(warm_pool=1),
        launcher=bwrap_launcher(network="sealed"),
    )
    pool = server.runner.pool
    assert pool is not None
    await _until(lambda: pool.warm == 1)
    pids = _warm_pids(pool)
    dispatch = {**workspace.mint_dispatch(), "agent_url": "http://192.0.2.1:9/api"}
    async with server.stream(dispatch) as response:
        lines = parse_stream(await Reader(response).rest())
    assert lines[-1]["code"] == "launch_failed" and "sealed" in lines[-1]["message"]
    assert pool.claimed == 0 and pool.misses == 1
    assert alive(pids) == []
    await server.shutdown()


async def _metric(client: httpx.AsyncClient, sample: str) -> float | None:
    for line in (await client.get("/metrics")).text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return None


async def test_the_runner_command_keeps_one_warm_and_kills_it_on_sigterm(
    workspace: WorkspaceServer,
) -> None:
    """``sandstream runner`` with its defaults: a pool of one, claimed by a turn,
    refilled, and gone with everything else after SIGTERM."""
    workspace.config = scripted(message="done")
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    async with trio.open_nursery() as nursery:
        args = ("--container-stderr", "discard")
        runner = await start_runner_process(nursery, *args, token="cli-token", env=env)
        headers = {"Authorization": "Bearer cli-token"}
        async with httpx.AsyncClient(base_url=runner.url, headers=headers, timeout=30) as client:
            warm = 'sandstream_warm_sandboxes{state="warm"}'
            with trio.fail_after(60):
                while await _metric(client, warm) != 1.0:
                    await trio.sleep(0.02)
            response = await client.post("/stream", json=workspace.mint_dispatch())
            assert parse_stream(response.content)[-1]["message"] == "done"
            assert await _metric(client, "sandstream_warm_claims_total") == 1.0
            with trio.fail_after(60):
                while await _metric(client, warm) != 1.0:
                    await trio.sleep(0.02)
        pids = [child.pid for child in psutil.Process(runner.pid).children(recursive=True)]
        assert pids  # the refilled sandbox
        runner.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await runner.exited.wait()
    assert runner.process.returncode == 0, "\n".join(runner.stderr)
    assert alive(pids) == []
