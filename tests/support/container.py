"""Run the container as a real subprocess and validate its stdout with the core.

::

    run = await run_container(ws.mint_dispatch("hi"), "--work-dir", str(tmp_path))
    assert run.returncode == 0
    assert run.terminal == {"type": "result", "message": ..., "ts": ...}
    run.turn.steps                      # folded by sandstream.core.StreamProcessor

Every :class:`ContainerRun` is checked by :func:`check_stream` on creation: stdout
holds only valid envelope lines (no diagnostics from the core), exactly one of them is
a terminal, it is the last line, and it was in the stdout itself (not synthesized).
For signal tests, :func:`start_container` gives a running process to poke at, and
:func:`remove_run_dirs` removes what a SIGKILLed container could not.
:func:`run_in_process` runs the same code path in the test's own trio loop (same CLI
arguments, stdout captured in memory, no signal handling): much faster, for the many
tests that do not exercise the process boundary.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import psutil
import trio

from benchmarks.support.namespaces import namespace_members
from sandstream.core import StreamProcessor, Turn
from sandstream.core.envelope import LIVE_EXTENSION

__all__ = [
    "ContainerRun",
    "RunningContainer",
    "catches_signal",
    "check_stream",
    "container_argv",
    "group_members",
    "namespace_members",
    "remove_run_dirs",
    "run_container",
    "run_in_process",
    "start_container",
    "wait_for_file",
    "wait_group_gone",
]


def container_argv(*args: str) -> list[str]:
    """The command line that starts the container with this Python."""
    return [sys.executable, "-m", "sandstream.container", *args]


def check_stream(stdout: bytes) -> Turn:
    """Validate container stdout with the core; return the folded turn.

    The ``live`` extension's lines are accepted (a test of a run that did not ask for
    them checks that there are none).

    Asserts: no diagnostics, a terminal present before the stream is closed (so it
    was emitted, not synthesized), exactly one terminal line, and it is the last line.
    """
    proc = StreamProcessor(mode="ndjson", extensions=[LIVE_EXTENSION])
    forwarded = proc.feed(stdout)
    assert proc.turn.terminal is not None, f"no terminal line in stdout: {stdout[-500:]!r}"
    forwarded += proc.close()
    assert proc.turn.diagnostics == [], proc.turn.diagnostics
    assert forwarded == stdout, "the core did not forward the stdout unchanged"
    lines = stdout.splitlines()
    assert stdout.endswith(b"\n"), "the last line is not terminated"
    kinds = [msgspec.json.decode(line)["type"] for line in lines]
    assert sum(kind in ("result", "error") for kind in kinds) == 1, kinds
    assert kinds[-1] in ("result", "error"), kinds
    return proc.turn


@dataclass
class ContainerRun:
    """A finished container process; ``turn`` is the core's view of its stdout."""

    returncode: int
    stdout: bytes
    stderr: bytes
    turn: Turn = field(init=False)

    def __post_init__(self) -> None:
        try:
            self.turn = check_stream(self.stdout)
        except AssertionError as exc:
            stderr = self.stderr.decode(errors="replace")
            raise AssertionError(f"{exc}\n--- stderr ---\n{stderr}") from exc

    @property
    def lines(self) -> list[dict[str, Any]]:
        """Every stdout line, decoded."""
        return [json.loads(line) for line in self.stdout.splitlines()]

    @property
    def terminal(self) -> dict[str, Any]:
        """The terminal line (the last one)."""
        return self.lines[-1]

    @property
    def logs(self) -> list[str]:
        """The messages of the ``log`` lines."""
        return [line["message"] for line in self.lines if line["type"] == "log"]

    def steps(self) -> list[dict[str, Any]]:
        """The ``step`` lines, in order."""
        return [line for line in self.lines if line["type"] == "step"]

    def __str__(self) -> str:
        return (
            f"exit {self.returncode}\n--- stdout ---\n{self.stdout.decode(errors='replace')}"
            f"--- stderr ---\n{self.stderr.decode(errors='replace')}"
        )


def _encode(dispatch: Mapping[str, Any] | bytes) -> bytes:
    return dispatch if isinstance(dispatch, bytes) else json.dumps(dispatch).encode()


async def run_container(
    dispatch: Mapping[str, Any] | bytes,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> ContainerRun:
    """Run the container to completion with ``dispatch`` on stdin."""
    with trio.fail_after(timeout):
        result = await trio.run_process(
            container_argv(*args),
            stdin=_encode(dispatch),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=dict(env) if env is not None else None,
        )
    return ContainerRun(result.returncode, result.stdout, result.stderr)


async def run_in_process(
    dispatch: Mapping[str, Any] | bytes, *args: str, timeout: float = 60.0
) -> ContainerRun:
    """Run the container's code in this trio loop with CLI ``args``; capture its output.

    The exit code is what ``main`` would return; ``stderr`` is empty (tracebacks of
    internal errors go to this process's stderr).
    """
    from sandstream.container.cli import build_parser, options_from_args
    from sandstream.container.dispatch import decode_dispatch
    from sandstream.container.errors import DispatchError
    from sandstream.container.output import Emitter
    from sandstream.container.run import EXIT_BAD_DISPATCH
    from sandstream.container.run import run_container as run
    from sandstream.core.envelope import Error

    options = options_from_args(build_parser().parse_args(list(args)), handle_signals=False)
    out = bytearray()
    emitter = Emitter(out.extend)
    try:
        decoded = decode_dispatch(_encode(dispatch))
    except DispatchError as exc:
        emitter.finish(Error(code=exc.code, message=exc.message))
        return ContainerRun(EXIT_BAD_DISPATCH, bytes(out), b"")
    with trio.fail_after(timeout):
        code = await run(decoded, emitter, options)
    return ContainerRun(code, bytes(out), b"")


@dataclass
class RunningContainer:
    """A container process started by :func:`start_container`."""

    process: trio.Process
    _stdout: bytearray
    _stderr: bytearray
    _done: trio.Event

    @property
    def stdout(self) -> bytes:
        return bytes(self._stdout)

    def send_signal(self, sig: int = signal.SIGTERM) -> None:
        self.process.send_signal(sig)

    async def wait(self, timeout: float = 30.0) -> ContainerRun:
        """Wait for exit (and the end of its output); return the validated run."""
        with trio.fail_after(timeout):
            await self.process.wait()
            await self._done.wait()
        assert self.process.returncode is not None
        return ContainerRun(self.process.returncode, self.stdout, bytes(self._stderr))


async def start_container(
    nursery: trio.Nursery,
    dispatch: Mapping[str, Any] | bytes | None,
    *args: str,
    env: Mapping[str, str] | None = None,
) -> RunningContainer:
    """Start the container in the background; its output is collected as it comes.

    With ``dispatch=None`` stdin is left open (the container waits for its dispatch).
    """
    process = await trio.lowlevel.open_process(
        container_argv(*args),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
    )
    stdout, stderr, done = bytearray(), bytearray(), trio.Event()
    assert process.stdin is not None
    out_stream, err_stream = process.stdout, process.stderr
    assert out_stream is not None and err_stream is not None
    if dispatch is not None:
        async with process.stdin:
            await process.stdin.send_all(_encode(dispatch))

    async def pump(stream: trio.abc.ReceiveStream, sink: bytearray) -> None:
        async with stream:
            while chunk := await stream.receive_some(65536):
                sink += chunk

    async def collect() -> None:
        async with trio.open_nursery() as inner:
            inner.start_soon(pump, out_stream, stdout)
            inner.start_soon(pump, err_stream, stderr)
        done.set()

    nursery.start_soon(collect)
    return RunningContainer(process, stdout, stderr, done)


def catches_signal(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler installed for ``sig`` (``SigCgt``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    return False


async def wait_for_file(path: Path, timeout: float = 20.0) -> str:
    """Poll until ``path`` exists with non-empty content; return the content."""
    with trio.fail_after(timeout):
        while True:
            if path.exists():
                text = path.read_text()
                if text.strip():
                    return text
            await trio.sleep(0.02)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members: list[int] = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def alive(pids: Sequence[int]) -> list[int]:
    """The ``pids`` that still exist and are not zombies."""
    living: list[int] = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                living.append(pid)
        except psutil.NoSuchProcess:
            continue
    return living


async def wait_group_gone(pgid: int, pids: Sequence[int] = (), timeout: float = 5.0) -> None:
    """Wait until group ``pgid`` and ``pids`` have no live process; fail after ``timeout``."""
    with trio.move_on_after(timeout):
        while group_members(pgid) or alive(pids):
            await trio.sleep(0.02)
    assert group_members(pgid) == [], f"process group {pgid} still has {group_members(pgid)}"
    assert alive(pids) == [], f"still alive: {alive(pids)}"


def remove_run_dirs() -> list[str]:
    """Remove the run and state dirs that SIGKILLed containers left; their names.

    A container removes its own dirs on any exit it lives through; a SIGKILL gives
    it none. They are in the test's own ``TMPDIR`` (tests/conftest.py), so this removes
    only what the calling test's containers left. Call it once they are dead.
    """
    temp = Path(tempfile.gettempdir())
    left = sorted([*temp.glob("sandstream"), *temp.glob("sandstream-run-*")])
    for folder in left:
        shutil.rmtree(folder)
    return [folder.name for folder in left]
