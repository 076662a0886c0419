"""Test harness for the runner: a real Hypercorn on 127.0.0.1:0 in a trio nursery.

::

    server = await start_runner(nursery, settings=..., launcher=...)
    async with server.client() as client:                 # httpx, HTTP/1.1, with the token
        async with client.stream("POST", "/stream", json=dispatch) as response:
            ...
    await server.shutdown()                               # the runner's real shutdown path

Processes are checked with psutil polling under a deadline (:func:`wait_gone`), never
with a fixed sleep.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import psutil
import trio
from hypercorn.config import Config
from quart_trio import QuartTrio

from benchmarks.support.servers import http1_client
from sandstream.core import StreamProcessor
from sandstream.core.schemas import ConfigResponse, LoadSpec, ScriptedAgent, ScriptedStep
from sandstream.server import (
    AccessRecord,
    ContainerLauncher,
    LocalContainer,
    LocalSubprocessLauncher,
    Runner,
    RunnerSettings,
    TurnStream,
    create_runner_app,
    get_runner,
    serve,
)
from sandstream.server.runner.bwrap import BwrapContainer, BwrapLauncher
from sandstream.server.runner.procs import TURN_MARKER_ENV
from sandstream.server.sessions import SessionSettings
from tests.support import processes
from tests.support.container import alive

TOKEN = "test-runner-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def settings(**overrides: Any) -> RunnerSettings:
    """Test settings: the test token, short timeouts where they do not matter."""
    values: dict[str, Any] = {"token": TOKEN, "max_live": 16, "shutdown_timeout": 5.0}
    values.update(overrides)
    return RunnerSettings(**values)


@dataclass
class RunnerServer:
    """A running runner: its URL, app, :class:`Runner` and the records of closed turns."""

    url: str
    app: QuartTrio
    runner: Runner
    records: list[AccessRecord] = field(default_factory=list)
    _stop: trio.Event = field(default_factory=trio.Event)
    _stopped: trio.Event = field(default_factory=trio.Event)

    def client(self, *, auth: bool = True, timeout: float = 30.0) -> httpx.AsyncClient:
        """An HTTP/1.1 httpx client for this server."""
        return http1_client(self.url, headers=AUTH if auth else None, timeout=timeout)

    @asynccontextmanager
    async def stream(self, dispatch: dict[str, Any]) -> AsyncIterator[httpx.Response]:
        """``POST /stream`` as a streamed response; leaving the block disconnects."""
        async with (
            self.client() as client,
            client.stream("POST", "/stream", json=dispatch) as response,
        ):
            yield response

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Trigger the serve loop's shutdown and wait for it to return."""
        self._stop.set()
        with trio.fail_after(timeout):
            await self._stopped.wait()

    async def wait_records(self, count: int, timeout: float = 30.0) -> list[AccessRecord]:
        """Wait until ``count`` turns have closed; return their records."""
        with trio.fail_after(timeout):
            while len(self.records) < count:
                await trio.sleep(0.01)
        return self.records

    async def wait_container(self, timeout: float = 30.0) -> tuple[TurnStream, LocalContainer]:
        """Wait for a running turn with a running container; return both."""
        with trio.fail_after(timeout):
            while True:
                for turn in self.runner.turns():
                    handle = turn.container
                    if isinstance(handle, LocalContainer) and handle.exit is None:
                        return turn, handle
                await trio.sleep(0.005)

    async def wait_sandbox(self, timeout: float = 30.0) -> tuple[TurnStream, BwrapContainer]:
        """Wait for a running turn with a running bwrap sandbox; return both."""
        with trio.fail_after(timeout):
            while True:
                for turn in self.runner.turns():
                    handle = turn.container
                    if isinstance(handle, BwrapContainer) and handle.exit is None:
                        return turn, handle
                await trio.sleep(0.005)


def bwrap_launcher(**overrides: Any) -> BwrapLauncher:
    """A bubblewrap launcher for tests (stderr discarded)."""
    values: dict[str, Any] = {"stderr": "discard"}
    values.update(overrides)
    return BwrapLauncher(**values)


async def start_runner(
    nursery: trio.Nursery,
    *,
    runner_settings: RunnerSettings | None = None,
    sessions: SessionSettings | None = None,
    launcher: ContainerLauncher | None = None,
    graceful_timeout: float = 5.0,
    backlog: int = 100,
    keep_alive_timeout: float = 5.0,
    hold_drain: trio.Event | None = None,
) -> RunnerServer:
    """Serve a runner app on 127.0.0.1:0 in ``nursery`` (stopped by ``shutdown``).

    With ``hold_drain``, the serve loop's drain waits for it after the runner's
    shutdown returned, so a test can look at a draining server without racing it.
    """
    app = create_runner_app(
        runner_settings or settings(),
        sessions=sessions,
        launcher=launcher or LocalSubprocessLauncher(stderr="discard"),
    )
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = graceful_timeout
    config.backlog = backlog
    config.keep_alive_timeout = keep_alive_timeout
    runner = get_runner(app)
    server = RunnerServer(url="", app=app, runner=runner)
    runner.add_listener(lambda turn, record: server.records.append(record))

    async def drain() -> None:
        await runner.shutdown()
        if hold_drain is not None:
            await hold_drain.wait()

    async def run(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve(
                app,
                config,
                shutdown_trigger=server._stop.wait,
                drain=drain,
                task_status=task_status,
            )
        finally:
            server._stopped.set()

    binds: list[str] = await nursery.start(run)
    server.url = binds[0].rstrip("/")
    return server


# -- configs --------------------------------------------------------------------


def scripted(*steps: ScriptedStep, message: str = "Done: {prompt}", **kw: Any) -> ConfigResponse:
    return ConfigResponse(agent=ScriptedAgent(steps=list(steps), message=message, **kw))


def shell(command: str, timeout_sec: float = 300) -> ScriptedStep:
    return ScriptedStep(tool="run_shell", args={"command": command, "timeout_sec": timeout_sec})


def load(lines: int, rate: float = 0.0, payload_bytes: int = 64) -> ConfigResponse:
    spec = LoadSpec(lines=lines, rate=rate, payload_bytes=payload_bytes)
    return ConfigResponse(agent=ScriptedAgent(load=spec, message="loaded"))


# -- stream checks ----------------------------------------------------------------


def parse_stream(body: bytes) -> list[dict[str, Any]]:
    """Check ``body`` is valid NDJSON that ends with exactly one terminal; return lines.

    Every line must pass the core's validation unchanged (nothing invalid forwarded).
    """
    processor = StreamProcessor(mode="ndjson")
    forwarded = processor.feed(body)
    assert processor.turn.diagnostic_count == 0, processor.turn.diagnostics
    assert forwarded == body, "the stream holds bytes the core would not forward"
    assert body.endswith(b"\n")
    lines: list[dict[str, Any]] = [msgspec.json.decode(line) for line in body.splitlines()]
    kinds = [line["type"] for line in lines]
    assert sum(kind in ("result", "error") for kind in kinds) == 1, kinds
    assert kinds[-1] in ("result", "error"), kinds
    return lines


# -- processes ---------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (a snapshot)."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def group_alive(pgid: int) -> list[int]:
    """Live (non-zombie) members of process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def marked(turn_ids: Sequence[str] | None = None) -> list[int]:
    """Live processes carrying a turn marker (of any turn, or of one of ``turn_ids``)."""
    return processes.with_env(TURN_MARKER_ENV, turn_ids)


async def wait_gone(
    pgid: int | None = None, pids: Sequence[int] = (), timeout: float = 10.0
) -> None:
    """Poll until group ``pgid`` and ``pids`` have no live process; fail at the deadline."""

    def leftovers() -> list[int]:
        return (group_alive(pgid) if pgid is not None else []) + alive(pids)

    with trio.move_on_after(timeout):
        while leftovers():
            await trio.sleep(0.01)
    assert leftovers() == [], f"still alive after {timeout} s: {leftovers()}"


async def wait_until_alive(pid: int, name: str, timeout: float = 20.0) -> list[int]:
    """Wait until a descendant of ``pid`` whose command line contains ``name`` runs."""
    with trio.fail_after(timeout):
        while True:
            found = []
            for child in _children(pid):
                try:
                    if name in " ".join(child.cmdline()):
                        found.append(child.pid)
                except psutil.Error:
                    continue
            if found:
                return found
            await trio.sleep(0.01)


def _children(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


class Reader:
    """Reads a streamed response line by line, keeping one byte iterator alive.

    (Abandoning an ``aiter_*`` generator of httpx closes the connection when it is
    finalized, which would be a disconnect at a random moment.)
    """

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.aiter_bytes()
        self._pending = b""
        self.body = b""
        self.eof = False

    async def line(self) -> dict[str, Any] | None:
        """The next line, decoded; ``None`` at the end of the stream."""
        while b"\n" not in self._pending:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self.eof = True
                return None
            self.body += chunk
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        decoded: dict[str, Any] = msgspec.json.decode(line)
        return decoded

    async def lines(self, count: int) -> list[dict[str, Any]]:
        """The next ``count`` lines (fewer at the end of the stream)."""
        out: list[dict[str, Any]] = []
        while len(out) < count and (line := await self.line()) is not None:
            out.append(line)
        return out

    async def until(self, predicate: Any) -> dict[str, Any]:
        """Read until a line satisfies ``predicate``; return it."""
        while (line := await self.line()) is not None:
            if predicate(line):
                return line
        raise AssertionError(f"the stream ended first: {self.body[-500:]!r}")

    async def rest(self) -> bytes:
        """Read to the end; return the whole body read so far."""
        while await self.line() is not None:
            pass
        return self.body
