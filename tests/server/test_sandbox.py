"""The bubblewrap sandbox: nothing a turn starts outlives it, however the turn ends.

Real bwrap, the real container (scripted agent, real ``run_shell`` skill), a real
runner on loopback. Each test starts processes that try to escape — a ``setsid``
daemon, a double fork, a ``SIGTERM`` ignorer, one that renames itself and clears its
environment — sees them alive in the sandbox's PID namespace, ends the turn, and
checks that nothing of the namespace is left.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
import trio.testing

from benchmarks.support.workspace import WorkspaceServer, start_workspace
from sandstream.core.schemas import EnvResponse, ScriptedError
from sandstream.server import ResourceLimits
from sandstream.server.runner.launcher import DEFAULT_CONTAINER_ARGV
from tests.server.harness import (
    Reader,
    RunnerServer,
    bwrap_launcher,
    load,
    parse_stream,
    scripted,
    settings,
    shell,
    start_runner,
)
from tests.support.container import namespace_members

PY = sys.executable

ESCAPES = (
    "setsid nohup sleep 1001 >/dev/null 2>&1 &\n"
    "(setsid sh -c 'sleep 1002 & exit 0' >/dev/null 2>&1 &)\n"
    f"setsid {PY} -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " time.sleep(1003)' >/dev/null 2>&1 &\n"
    f'setsid env -i {PY} -c \'import ctypes, sys, time; sys.argv[0] = "innocent";'
    ' ctypes.CDLL(None).prctl(15, b"innocent", 0, 0, 0); time.sleep(1004)\''
    " >/dev/null 2>&1 &\n"
)
"""Four processes that leave the skill's process group and session, one way each."""

WAIT_ESCAPED = "sleep 2"
"""Long enough for the test to see the four escapees from the host."""


def _escapee(process: psutil.Process) -> str | None:
    """Which of the four escapees ``process`` is (not the shell that started them)."""
    try:
        name, cmdline = process.name(), process.cmdline()
    except psutil.Error:
        return None
    if name == "innocent":
        return "innocent"
    if name == "sleep" and cmdline[1:] in (["1001"], ["1002"]):
        return f"sleep {cmdline[1]}"
    if name.startswith("python") and any("SIG_IGN" in arg for arg in cmdline):
        return "SIG_IGN"
    return None


class Watcher:
    """Polls a sandbox's namespace while the turn runs; remembers every escapee seen."""

    def __init__(self) -> None:
        self.namespace = 0
        self.hold: int | None = None
        self.seen: dict[str, psutil.Process] = {}
        self.all_seen = trio.Event()

    async def run(self, server: RunnerServer) -> None:
        _, sandbox = await server.wait_sandbox()
        # Holding the namespace open keeps its inode from being reused by a later
        # sandbox, so the final check looks at this one namespace only.
        self.hold = os.open(f"/proc/{sandbox.init_pid}/ns/pid", os.O_RDONLY)
        self.namespace = os.fstat(self.hold).st_ino
        assert self.namespace == sandbox.pid_namespace
        while True:
            for pid in namespace_members(self.namespace):
                with contextlib.suppress(psutil.Error):
                    process = psutil.Process(pid)
                    kind = _escapee(process)
                    if kind is not None:
                        self.seen.setdefault(kind, process)
            if len(self.seen) == 4:
                self.all_seen.set()
            await trio.sleep(0.005)


async def _assert_sandbox_empty(server: RunnerServer, watcher: Watcher) -> None:
    assert sorted(watcher.seen) == ["SIG_IGN", "innocent", "sleep 1001", "sleep 1002"]
    await server.wait_records(1)
    # The launcher returned only after bwrap was reaped: the namespace is empty *now*.
    try:
        assert namespace_members(watcher.namespace) == []
    finally:
        if watcher.hold is not None:
            os.close(watcher.hold)
    # (is_running compares the start time too: a reused pid is not the escapee.)
    assert [kind for kind, process in watcher.seen.items() if process.is_running()] == []
    assert server.runner.live == 0


async def _turn(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    end: Callable[[RunnerServer, Reader, Watcher], Awaitable[None]],
    *,
    config: Any,
    **setting: Any,
) -> tuple[RunnerServer, Watcher]:
    server = await start_runner(
        nursery, runner_settings=settings(**setting), launcher=bwrap_launcher()
    )
    workspace.config = config
    watcher = Watcher()
    async with trio.open_nursery() as inner:
        inner.start_soon(watcher.run, server)
        async with server.stream(workspace.mint_dispatch()) as response:
            assert response.status_code == 200
            await end(server, Reader(response), watcher)
        await server.wait_records(1)
        inner.cancel_scope.cancel()
    return server, watcher


ESCAPE_STEP = shell(ESCAPES + WAIT_ESCAPED, timeout_sec=60)


async def test_escapees_die_when_the_turn_ends_with_its_result(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    ended: list[dict[str, Any]] = []

    async def end(server: RunnerServer, reader: Reader, watcher: Watcher) -> None:
        await reader.rest()
        ended.append(parse_stream(reader.body)[-1])

    server, watcher = await _turn(nursery, workspace, end, config=scripted(ESCAPE_STEP))
    assert ended[0]["type"] == "result"
    assert server.records[0].outcome == "result"
    await _assert_sandbox_empty(server, watcher)


async def test_escapees_die_when_the_turn_ends_with_an_error(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    ended: list[dict[str, Any]] = []

    async def end(server: RunnerServer, reader: Reader, watcher: Watcher) -> None:
        await reader.rest()
        ended.append(parse_stream(reader.body)[-1])

    config = scripted(ESCAPE_STEP, error=ScriptedError(code="boom", message="scripted"))
    server, watcher = await _turn(nursery, workspace, end, config=config)
    assert ended[0]["code"] == "boom"
    await _assert_sandbox_empty(server, watcher)


HOLD = shell("sleep 600", timeout_sec=600)


async def test_escapees_die_when_the_client_disconnects(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    async def end(server: RunnerServer, reader: Reader, watcher: Watcher) -> None:
        with trio.fail_after(30):
            await watcher.all_seen.wait()
        # leaving the block closes the connection

    server, watcher = await _turn(nursery, workspace, end, config=scripted(ESCAPE_STEP, HOLD))
    assert server.records[0].outcome == "client_disconnected"
    await _assert_sandbox_empty(server, watcher)


RUNTIME_CAP = 20.0
"""The cap of the runtime-cap test, on trio's clock: reached by a jump, not by waiting."""


async def test_escapees_die_at_the_runtime_cap(
    nursery: trio.Nursery, workspace: WorkspaceServer, mock_clock: trio.testing.MockClock
) -> None:
    """The cap ends the turn only once the four escapees exist.

    A cap of a few real seconds raced the sandbox's start-up: on a loaded machine the
    turn reached it before the escapees were started (or seen), and the test failed.
    The runner measures the cap on trio's clock, so this test runs that clock in real
    time and moves it to the cap once the escapees are seen: however slow the start,
    the cap ends a turn with all four alive.
    """
    mock_clock.rate = 1.0
    opened = trio.current_time()
    ended: list[dict[str, Any]] = []

    async def end(server: RunnerServer, reader: Reader, watcher: Watcher) -> None:
        with trio.fail_after(60):
            await watcher.all_seen.wait()
        mock_clock.jump(max(0.0, RUNTIME_CAP - (trio.current_time() - opened)))
        await reader.rest()
        ended.append(parse_stream(reader.body)[-1])

    server, watcher = await _turn(
        nursery, workspace, end, config=scripted(ESCAPE_STEP, HOLD), runtime_cap=RUNTIME_CAP
    )
    assert ended[0]["code"] == "runtime_exceeded"
    await _assert_sandbox_empty(server, watcher)


async def test_escapees_die_when_the_client_stalls(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    async def end(server: RunnerServer, reader: Reader, watcher: Watcher) -> None:
        with trio.fail_after(30):
            await watcher.all_seen.wait()
        # The client reads nothing more; the container keeps writing until it fills
        # the socket buffers, then the stall watchdog ends the turn.
        await server.wait_records(1, timeout=60)

    # The setup script starts the escapees, then the agent floods its stdout.
    workspace.env = EnvResponse(setup_script=ESCAPES + WAIT_ESCAPED)
    server, watcher = await _turn(
        nursery, workspace, end, config=load(1_000_000, payload_bytes=1024), stall_timeout=1.0
    )
    assert server.records[0].outcome == "stalled", server.records
    await _assert_sandbox_empty(server, watcher)


async def test_escapees_die_on_shutdown(nursery: trio.Nursery, workspace: WorkspaceServer) -> None:
    ended: list[dict[str, Any]] = []

    async def end(server: RunnerServer, reader: Reader, watcher: Watcher) -> None:
        with trio.fail_after(30):
            await watcher.all_seen.wait()
        async with trio.open_nursery() as inner:
            inner.start_soon(server.shutdown)
            await reader.rest()
        ended.append(parse_stream(reader.body)[-1])

    server, watcher = await _turn(nursery, workspace, end, config=scripted(ESCAPE_STEP, HOLD))
    assert ended[0]["code"] == "shutdown"
    await _assert_sandbox_empty(server, watcher)


async def test_a_failing_sandbox_start_is_a_launch_error(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    launcher = bwrap_launcher(argv=["/nonexistent/sandstream-container"])
    server = await start_runner(nursery, launcher=launcher)
    async with server.stream(workspace.mint_dispatch()) as response:
        body = await response.aread()
    line = parse_stream(body)[-1]
    assert line["code"] == "launch_failed"
    assert "/nonexistent/sandstream-container" in line["message"]


def test_the_sandbox_command_is_checked() -> None:
    with pytest.raises(ValueError, match="bubblewrap is not installed"):
        bwrap_launcher(bwrap="no-such-bwrap")
    with pytest.raises(ValueError, match="argv"):
        bwrap_launcher(argv=[])


# -- limits -----------------------------------------------------------------------------

FORK_BOMB = "bomb() { bomb | bomb & }; bomb; sleep 60"
MEMORY_HOG = f"{PY} -c 'x = [b\"x\" * (8 << 20) for _ in range(4096)]'; sleep 60"
"""Allocates 32 GiB; the kernel kills it, the shell goes on (the turn must not)."""


async def _limited_turn_beside_a_normal_one(
    nursery: trio.Nursery, workspace: WorkspaceServer, command: str, **limits: Any
) -> tuple[dict[str, Any], dict[str, Any], RunnerServer]:
    """Run ``command`` in one turn and a normal turn beside it; return both terminals."""
    launcher = bwrap_launcher(limits=ResourceLimits(**limits))
    server = await start_runner(nursery, launcher=launcher)
    workspace.config = scripted(shell(command, timeout_sec=120))
    other = await start_workspace(nursery, config=scripted(shell("sleep 1; echo fine")))
    terminals: dict[str, dict[str, Any]] = {}

    async def run(name: str, dispatch: dict[str, Any]) -> None:
        async with server.stream(dispatch) as response:
            terminals[name] = parse_stream(await response.aread())[-1]

    async with trio.open_nursery() as inner:
        inner.start_soon(run, "limited", workspace.mint_dispatch())
        await server.wait_sandbox()
        inner.start_soon(run, "normal", other.mint_dispatch())
    return terminals["limited"], terminals["normal"], server


async def test_a_fork_bomb_ends_its_turn_with_process_limit(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    limited, normal, server = await _limited_turn_beside_a_normal_one(
        nursery, workspace, FORK_BOMB, processes=64
    )
    assert limited["code"] == "process_limit", limited
    assert "64 processes" in limited["message"]
    assert normal["type"] == "result"
    records = {record.terminal: record for record in await server.wait_records(2)}
    assert records["process_limit"].outcome == "limit_exceeded"


async def test_a_memory_hog_ends_its_turn_with_memory_limit(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    limited, normal, _ = await _limited_turn_beside_a_normal_one(
        nursery, workspace, MEMORY_HOG, memory_bytes=256 << 20
    )
    assert limited["code"] == "memory_limit", limited
    assert "256 MiB" in limited["message"]
    assert normal["type"] == "result"


async def test_a_full_work_dir_ends_its_turn_with_disk_limit(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    limited, normal, _ = await _limited_turn_beside_a_normal_one(
        nursery, workspace, "head -c 100M /dev/zero > big; sleep 60", disk_bytes=16 << 20
    )
    assert limited["code"] == "disk_limit", limited
    assert normal["type"] == "result"


async def test_a_cpu_spinner_ends_its_turn_with_cpu_limit(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    limited, normal, _ = await _limited_turn_beside_a_normal_one(
        nursery, workspace, f"{PY} -c 'while True: pass'", cpu_seconds=1.5
    )
    assert limited["code"] == "cpu_limit", limited
    assert normal["type"] == "result"


async def test_limits_are_enforced_from_proc_without_cgroups(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    launcher = bwrap_launcher(
        use_cgroups=False, limits=ResourceLimits(memory_bytes=256 << 20, processes=20)
    )
    assert launcher.cgroups is None
    server = await start_runner(nursery, launcher=launcher)
    many = "for i in $(seq 40); do sleep 60 & done; wait"
    for command, code in ((MEMORY_HOG, "memory_limit"), (many, "process_limit")):
        workspace.config = scripted(shell(command, timeout_sec=120))
        async with server.stream(workspace.mint_dispatch()) as response:
            assert parse_stream(await response.aread())[-1]["code"] == code


# -- what a sandbox can reach -----------------------------------------------------------------


async def test_the_server_secrets_are_out_of_reach(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wherever the checkout is (under ``/tmp`` too, where the sandbox sees it and its
    venv): the secrets are fresh random values, so a search of what the sandbox sees
    can only find a leak, never this test's own source; it lists file names only, so
    its output stays far below the step's output bound."""
    api, runner, database = (f"{kind}-{secrets.token_hex(16)}" for kind in ("api", "run", "db"))
    monkeypatch.setenv("SANDSTREAM_API_TOKEN", api)
    monkeypatch.setenv("SANDSTREAM_RUNNER_TOKEN", runner)
    data = tmp_path / "data"
    data.mkdir()
    (data / "api-token").write_text(api)
    (data / "runner-token").write_text(runner)
    (data / "chat.sqlite3").write_text(database)
    (tmp_path / "visible.txt").write_text("a file the sandbox may read")
    # What to search for, in a file of its own (not in the command, which is streamed).
    (tmp_path / "wanted").write_text(f"{api}\n{runner}\n{database}\n")
    # tmp_path (holding the data dir) is made visible on purpose: the data dir must
    # stay hidden even under a directory the sandbox sees.
    launcher = bwrap_launcher(hidden_paths=[str(data)], extra_paths=[str(tmp_path)])
    server = await start_runner(nursery, launcher=launcher)
    probe = (
        f"cat {tmp_path}/visible.txt; ls -A {data}; cat {data}/api-token {data}/runner-token"
        f" {data}/chat.sqlite3; env; cat /proc/*/environ | tr '\\0' '\\n'; ls /proc;"
        f" grep -rlF -f {tmp_path}/wanted --exclude=wanted /etc /tmp 2>/dev/null; echo probed"
    )
    workspace.config = scripted(shell(probe))
    async with server.stream(workspace.mint_dispatch()) as response:
        body = await response.aread()
    lines = parse_stream(body)
    (step,) = [line for line in lines if line["type"] == "step" and line["status"] == "succeeded"]
    out = step["result"]["stdout"]
    assert not step["result"]["stdout_truncated"]
    assert "a file the sandbox may read" in out and "probed" in out
    for secret in (api, runner, database):
        assert secret not in out
        assert secret.encode() not in body
    assert "SANDSTREAM_API_TOKEN" not in out and "SANDSTREAM_RUNNER_TOKEN" not in out
    assert "No such file" in step["result"]["stderr"]


async def test_the_network_switch(nursery: trio.Nursery, workspace: WorkspaceServer) -> None:
    """Network none: the container cannot even reach its workspace on loopback (it
    retries its callbacks for a second, not the default minute)."""
    argv = [*DEFAULT_CONTAINER_ARGV, "--callback-retry", "1"]
    server = await start_runner(nursery, launcher=bwrap_launcher(network="none", argv=argv))
    async with server.stream(workspace.mint_dispatch()) as response:
        line = parse_stream(await response.aread())[-1]
    assert line["code"] == "bootstrap_failed", line


async def test_a_custom_command_under_tmp_sees_what_it_names(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    script = tmp_path / "container.sh"
    reply = tmp_path / "reply.ndjson"
    reply.write_text('{"type":"result","message":"from a file"}\n')
    script.write_text('#!/bin/sh\ncat >/dev/null\ncat "$1"\n')
    script.chmod(0o755)
    server = await start_runner(nursery, launcher=bwrap_launcher(argv=[str(script), str(reply)]))
    async with server.stream(workspace.mint_dispatch()) as response:
        line = parse_stream(await response.aread())[-1]
    assert line == {"type": "result", "message": "from a file"}


async def test_a_limit_hit_seen_only_at_exit_still_names_the_limit(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    """The OOM killer ends the container itself before any poll: memory_limit, not
    upstream_closed (the cgroup's counters are read once more when it exits)."""
    hog = f"cat >/dev/null; exec {PY} -c 'x = [b\"x\" * (8 << 20) for _ in range(4096)]'"
    launcher = bwrap_launcher(
        argv=["sh", "-c", hog], limits=ResourceLimits(memory_bytes=128 << 20), poll_interval=600
    )
    assert launcher.cgroups is not None  # kernel enforcement is what this is about
    server = await start_runner(nursery, launcher=launcher)
    async with server.stream(workspace.mint_dispatch()) as response:
        line = parse_stream(await response.aread())[-1]
    assert line["code"] == "memory_limit", line
