"""Teardown latency: from the client closing a live stream to the container reaped.

``python -m benchmarks.teardown.run [--trials 200] [--container real|shell|both]
[--sandbox local|bwrap|both] [--busy N] [--json]``

Each trial posts a turn to a runner (Hypercorn on loopback, served in this process so
that its timestamps share our clock), reads until the container is streaming (paced
load mode, 100 lines/s), then closes the response and times:

- **total**: client close → the container reaped (``local``: its leader, its group
  killed and empty; ``bwrap``: bwrap, so its whole PID namespace);
- **reaction**: client close → the stop begins (Hypercorn notices the disconnect,
  quart-trio cancels the response task, the turn's ``__aexit__`` runs): ``SIGTERM``
  to the group (``local``), ``SIGKILL`` to the namespace's init (``bwrap``);
- **container exit**: stop → reaped (``local``: the container's own shutdown), and
  within it **stdout closed**: stop → EOF on the container's stdout.

``--busy N`` runs N CPU-spinning processes meanwhile (a loaded machine).

``real`` is ``python -m sandstream.container`` (the scripted agent in load mode, boot
and callbacks included); ``shell`` is a minimal container (``sh`` printing an envelope
line every 10 ms) that dies on ``SIGTERM`` at once, which isolates the runner's part.
After each trial the group (``local``) or the PID namespace (``bwrap``) is checked to
hold no live process (zombies of orphaned grandchildren are dead; reaping them is
init's job).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Final

import httpx
import trio

from sandstream.container.schemas import ConfigResponse, LoadSpec, ScriptedAgent
from sandstream.server import (
    BwrapContainer,
    BwrapLauncher,
    ContainerExit,
    ContainerHandle,
    ContainerLauncher,
    LocalContainer,
    LocalSubprocessLauncher,
    RunnerSettings,
)
from sandstream.server.runner.launcher import DEFAULT_CONTAINER_ARGV
from tests.support.container import namespace_members
from tests.support.workspace import start_workspace

from ..runner.support import (
    TOKEN,
    busy_processes,
    environment,
    live_group_members,
    start_in_process,
    summary,
)

GOAL_P99_MS: Final = 5.0

SHELL_CONTAINER: Final = (
    "cat >/dev/null; "
    'while :; do echo \'{"type":"log","level":"info","message":"tick"}\'; '
    "sleep 0.01; done"
)


class _TimedStdout(trio.abc.ReceiveStream):
    """The container's stdout, noting when it reached EOF."""

    def __init__(self, inner: trio.abc.ReceiveStream) -> None:
        self.inner = inner
        self.eof_at: float | None = None

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if not data and self.eof_at is None:
            self.eof_at = time.monotonic()
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


class _TimedHandle:
    """A container handle whose stdout is a :class:`_TimedStdout`."""

    def __init__(self, inner: ContainerHandle) -> None:
        self.inner = inner
        self.stdout = _TimedStdout(inner.stdout)

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def exit(self) -> ContainerExit | None:
        return self.inner.exit


@dataclass
class _TimedLauncher:
    """Wraps a launcher; hands the turn a :class:`_TimedHandle` (to see stdout's EOF)."""

    inner: ContainerLauncher

    async def run(
        self,
        dispatch: bytes,
        turn_id: str,
        *,
        messages: trio.MemoryReceiveChannel[bytes] | None = None,
        task_status: trio.TaskStatus[ContainerHandle] = trio.TASK_STATUS_IGNORED,
    ) -> ContainerExit:
        outer = task_status

        class _Status:
            def started(self, handle: ContainerHandle | None = None) -> None:
                assert handle is not None
                outer.started(_TimedHandle(handle))

        return await self.inner.run(dispatch, turn_id, messages=messages, task_status=_Status())


def _launcher(sandbox: str, kind: str) -> ContainerLauncher:
    argv = DEFAULT_CONTAINER_ARGV if kind == "real" else ("sh", "-c", SHELL_CONTAINER)
    if sandbox == "bwrap":
        return BwrapLauncher(argv=argv, stderr="discard")
    return LocalSubprocessLauncher(argv=argv, stderr="discard")


def _left_behind(handle: ContainerHandle) -> bool:
    """Whether anything of the container still runs (its group, or its namespace)."""
    if isinstance(handle, BwrapContainer):
        return bool(namespace_members(handle.pid_namespace))
    assert isinstance(handle, LocalContainer)
    return bool(live_group_members(handle.pgid))


async def _trials(sandbox: str, kind: str, trials: int, warmup: int) -> dict[str, Any]:
    launcher = _TimedLauncher(_launcher(sandbox, kind))
    settings = RunnerSettings(token=TOKEN, max_live=4)
    totals: list[float] = []
    reactions: list[float] = []
    exits: list[float] = []
    eofs: list[float] = []
    escalated = 0
    leftovers = 0
    async with trio.open_nursery() as nursery:
        workspace = await start_workspace(
            nursery,
            config=ConfigResponse(agent=ScriptedAgent(load=LoadSpec(lines=10_000_000, rate=100.0))),
        )
        server = await start_in_process(nursery, settings, launcher)
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as client:
            for index in range(warmup + trials):
                before = len(server.closed)
                async with client.stream(
                    "POST", "/stream", json=workspace.mint_dispatch()
                ) as response:
                    chunks = response.aiter_raw()
                    received = 0
                    body = b""
                    while received < 5:  # streaming: several lines arrived
                        try:
                            chunk = await chunks.__anext__()
                        except StopAsyncIteration:
                            raise RuntimeError(
                                f"{sandbox}/{kind}: the stream ended early: {body[-300:]!r}"
                            ) from None
                        body += chunk
                        received += chunk.count(b"\n")
                    closed_at = time.monotonic()
                # leaving the block closed the connection
                with trio.fail_after(30):
                    turn, record = await server.wait_closed(before + 1)
                exit_ = turn.container_exit
                assert exit_ is not None and exit_.stopped_at is not None, record
                handle = turn.container
                assert isinstance(handle, _TimedHandle)
                if _left_behind(handle.inner):
                    leftovers += 1
                if index < warmup:
                    continue
                totals.append((exit_.reaped_at - closed_at) * 1000)
                reactions.append((exit_.stopped_at - closed_at) * 1000)
                exits.append((exit_.reaped_at - exit_.stopped_at) * 1000)
                if handle.stdout.eof_at is not None:
                    eofs.append((handle.stdout.eof_at - exit_.stopped_at) * 1000)
                escalated += exit_.escalated
        server.stop.set()
        nursery.cancel_scope.cancel()
    return {
        "sandbox": sandbox,
        "container": kind,
        "total_ms": summary(totals),
        "reaction_ms": summary(reactions),
        "container_exit_ms": summary(exits),
        "sigterm_to_stdout_closed_ms": summary(eofs),
        "escalated_to_sigkill": escalated,
        "groups_left_behind": leftovers,
    }


def _row(name: str, stats: dict[str, float]) -> str:
    return (
        f"  {name:<18} p50 {stats['p50']:8.2f}  p95 {stats['p95']:8.2f}  "
        f"p99 {stats['p99']:8.2f}  max {stats['max']:8.2f}  (ms, n={stats['n']})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--container", choices=("real", "shell", "both"), default="both")
    parser.add_argument("--sandbox", choices=("local", "bwrap", "both"), default="both")
    parser.add_argument(
        "--busy", type=int, default=0, help="CPU-spinning processes to load the machine with"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    kinds = ["shell", "real"] if args.container == "both" else [args.container]
    sandboxes = ["local", "bwrap"] if args.sandbox == "both" else [args.sandbox]
    results = []
    env_before = environment()
    with busy_processes(args.busy):
        for kind in kinds:
            for sandbox in sandboxes:
                results.append(trio.run(_trials, sandbox, kind, args.trials, args.warmup))
    doc = {"environment": env_before, "load_after": os.getloadavg()[0], "results": results}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"teardown: client close -> container reaped; busy={args.busy}; {env_before}")
    for result in results:
        total = result["total_ms"]
        met = "met" if total["p99"] < GOAL_P99_MS else "NOT met"
        print(
            f"sandbox={result['sandbox']} container={result['container']}: "
            f"goal p99 < {GOAL_P99_MS:g} ms {met}"
        )
        print(_row("total", total))
        print(_row("reaction", result["reaction_ms"]))
        print(_row("container exit", result["container_exit_ms"]))
        print(_row("  stdout closed", result["sigterm_to_stdout_closed_ms"]))
        print(
            f"  escalated to SIGKILL: {result['escalated_to_sigkill']}, "
            f"sandboxes left behind: {result['groups_left_behind']}"
        )
    print(f"load average after: {doc['load_after']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
