"""Ending a bubblewrap sandbox: what the teardown kills, speeds up and releases.

Real bwrap and the real container on a real runner; real host processes for the
helpers that must never hit anything but the sandbox. (How long it takes is measured
in ``benchmarks/teardown``, not asserted here.)
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.server import BwrapLauncher, LocalSubprocessLauncher, Runner
from sandstream.server.runner import bwrap
from tests.server.harness import Reader, bwrap_launcher, load, settings, start_runner


def _holders(inode: int) -> list[str]:
    """This process's fds that hold mount namespace ``inode``."""
    link = f"mnt:[{inode}]"
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == link:
                found.append(fd)
        except OSError:
            continue
    return found


def _in_mount_namespace(inode: int) -> list[int]:
    """Processes whose mount namespace is ``inode``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}/ns/mnt").st_ino == inode:
                    found.append(int(name))
            except OSError:
                continue
    return found


async def test_the_sandbox_mounts_are_held_while_it_runs_and_released_after(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    server = await start_runner(nursery, launcher=bwrap_launcher())
    workspace.config = load(10_000_000, rate=100.0)
    async with server.stream(workspace.mint_dispatch()) as response:
        assert response.status_code == 200
        await Reader(response).until(lambda line: line["type"] == "log")  # it streams
        _, sandbox = await server.wait_sandbox()
        mounts = os.stat(f"/proc/{sandbox.init_pid}/ns/mnt").st_ino
        assert mounts != os.stat("/proc/self/ns/mnt").st_ino
        assert len(_holders(mounts)) == 1  # the runner's hold
        # leaving the block disconnects: the turn's sandbox is killed
    (record,) = await server.wait_records(1)
    assert record.outcome == "client_disconnected"
    assert _holders(mounts) == []
    assert _in_mount_namespace(mounts) == []


def _host_sleeper() -> subprocess.Popen[bytes]:
    """A host process in a session of its own."""
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_a_process_outside_the_sandbox_namespace_is_never_killed() -> None:
    sleeper = _host_sleeper()
    try:
        other_namespace = os.stat("/proc/self/ns/pid").st_ino + 1
        bwrap._kill_member(sleeper.pid, other_namespace)
        sleeper.terminate()  # had SIGKILL been sent, it would have died of that
        assert sleeper.wait(timeout=30) == -signal.SIGTERM
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_of_the_sandbox_namespace_is_killed() -> None:
    sleeper = _host_sleeper()
    try:
        namespace = os.stat(f"/proc/{sleeper.pid}/ns/pid").st_ino
        bwrap._kill_member(sleeper.pid, namespace)
        assert sleeper.wait(timeout=30) == -signal.SIGKILL
    finally:
        sleeper.kill()
        sleeper.wait()


def _may_use_real_time() -> bool:
    """Whether this process may give others a real-time policy: ``CAP_SYS_NICE`` or an
    ``RLIMIT_RTPRIO`` (root in a container often lacks the capability)."""
    status = Path("/proc/self/status").read_text()
    (effective,) = [line.split()[1] for line in status.splitlines() if line.startswith("CapEff")]
    cap_sys_nice = 23
    return (
        bool(int(effective, 16) >> cap_sys_nice & 1)
        or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 0
    )


def test_a_killed_process_exits_at_real_time_priority_where_the_runner_may() -> None:
    sleeper = _host_sleeper()
    try:
        bwrap._boost(sleeper.pid)
        policy = os.sched_getscheduler(sleeper.pid)
        assert policy == (os.SCHED_FIFO if _may_use_real_time() else os.SCHED_OTHER)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_runner_given_no_launcher_sandboxes_with_bwrap() -> None:
    assert isinstance(Runner(settings()).launcher, BwrapLauncher)


def test_without_bwrap_a_runner_falls_back_to_local_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with caplog.at_level(logging.WARNING, logger="sandstream.runner"):
        runner = Runner(settings())
    assert isinstance(runner.launcher, LocalSubprocessLauncher)
    assert "NOT isolated" in caplog.text
