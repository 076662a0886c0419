"""Shared pieces of the runner benchmarks: servers, durable sessions, percentiles, the
machine's state."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import trio
from hypercorn.config import Config
from quart_trio import QuartTrio

from benchmarks.support import runner_process
from benchmarks.support.runner_process import RunnerProcess
from sandstream.core.schemas import HEAP_TUNABLES
from sandstream.server import (
    AccessRecord,
    BwrapLauncher,
    ContainerLauncher,
    LocalSubprocessLauncher,
    Runner,
    RunnerSettings,
    TurnStream,
    create_runner_app,
    get_runner,
    serve,
)
from sandstream.server.sessions import SessionSettings

CONTAINER_ARGV = (sys.executable, "-m", "sandstream.container")
TOKEN = "benchmark-token"

HEAPS: Final = ("huge", "small")
"""The container's heap: ``huge``, the launchers as shipped (in huge pages where the
host allows); ``small``, started without :data:`HEAP_TUNABLES`, as before them (so it
also collapses nothing)."""


class _SmallPagesBwrap(BwrapLauncher):
    def sandbox_env(self, turn_id: str) -> dict[str, str]:
        return _without_heap_tunables(super().sandbox_env(turn_id))


class _SmallPagesLocal(LocalSubprocessLauncher):
    def container_env(self, turn_id: str, tmpdir: str) -> dict[str, str]:
        return _without_heap_tunables(super().container_env(turn_id, tmpdir))


def _without_heap_tunables(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in HEAP_TUNABLES}


def launcher(sandbox: str, argv: Sequence[str], heap: str = "huge") -> ContainerLauncher:
    """A ``bwrap`` or ``local`` launcher of ``argv`` (stderr discarded), with the
    container's ``heap`` as :data:`HEAPS` says."""
    if sandbox == "bwrap":
        bwrap = BwrapLauncher if heap == "huge" else _SmallPagesBwrap
        return bwrap(argv=argv, stderr="discard")
    local = LocalSubprocessLauncher if heap == "huge" else _SmallPagesLocal
    return local(argv=argv, stderr="discard")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of ``values``."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max/mean of ``values``."""
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else math.nan,
        "mean": sum(values) / len(values) if values else math.nan,
    }


@contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """Run ``count`` CPU-spinning processes for the duration of the block."""
    # A spinner stops by itself when its parent is gone (even one killed outright).
    spin = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def live_group_members(pgid: int) -> list[int]:
    """Non-zombie processes in group ``pgid`` (orphaned zombies are dead already)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(name))
    return members


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


@dataclass
class InProcessRunner:
    """A runner served by Hypercorn inside this trio run (for exact timestamps, or to
    reach its app's services directly)."""

    url: str
    app: QuartTrio
    runner: Runner
    closed: list[tuple[TurnStream, AccessRecord]] = field(default_factory=list)
    stop: trio.Event = field(default_factory=trio.Event)
    """Set to stop serving: the runner drains, then the app shuts down."""
    stopped: trio.Event = field(default_factory=trio.Event)
    """Set once serving has stopped (the app's shutdown done)."""
    changed: trio.Event = field(default_factory=trio.Event)
    """Set (and replaced) each time a turn closes."""

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Stop serving and wait until it has stopped."""
        self.stop.set()
        with trio.fail_after(timeout):
            await self.stopped.wait()

    def note_closed(self, turn: TurnStream, record: AccessRecord) -> None:
        self.closed.append((turn, record))
        self.changed.set()
        self.changed = trio.Event()

    async def wait_closed(self, count: int) -> tuple[TurnStream, AccessRecord]:
        """Wait until ``count`` turns have closed; the last one."""
        while len(self.closed) < count:
            await self.changed.wait()
        return self.closed[-1]


async def start_in_process(
    nursery: trio.Nursery,
    settings: RunnerSettings,
    launcher: ContainerLauncher,
    *,
    sessions: SessionSettings | None = None,
) -> InProcessRunner:
    """Serve a runner app on ``127.0.0.1:0`` in ``nursery``, with durable sessions if
    ``sessions`` are given (its :class:`SessionService` is then ``get_sessions(app)``)."""
    app = create_runner_app(settings, sessions=sessions, launcher=launcher)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    runner = get_runner(app)
    handle = InProcessRunner(url="", app=app, runner=runner)
    runner.add_listener(handle.note_closed)

    async def run(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve(
                app,
                config,
                shutdown_trigger=handle.stop.wait,
                drain=runner.shutdown,
                task_status=task_status,
            )
        finally:
            handle.stopped.set()

    binds: list[str] = await nursery.start(run)
    handle.url = binds[0].rstrip("/")
    return handle


async def create_session(client: httpx.AsyncClient, dispatch: dict[str, Any]) -> str:
    """``POST /sessions`` with ``dispatch``; the new session's id."""
    response = await client.post("/sessions", json=dispatch)
    response.raise_for_status()
    session_id: str = response.json()["id"]
    return session_id


async def wait_state(
    client: httpx.AsyncClient, session_id: str, state: str, timeout: float = 600.0
) -> dict[str, Any]:
    """Poll the session's status until it is ``state``; that status."""
    with trio.fail_after(timeout):
        while True:
            status: dict[str, Any] = (await client.get(f"/sessions/{session_id}/status")).json()
            if status["state"] == state:
                return status
            await trio.sleep(0.05)


async def start_runner_process(nursery: trio.Nursery, *args: str) -> RunnerProcess:
    """``sandstream runner --port 0 ARGS`` as a process of its own (the production
    shape), with :data:`TOKEN` and its containers' stderr discarded; once it listens."""
    return await runner_process.start_runner_process(
        nursery, "--container-stderr", "discard", *args, token=TOKEN
    )
