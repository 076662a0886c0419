"""The ``acp`` agent kind: run one turn of an agent program over the Agent Client Protocol.

:func:`run_acp` prepares the agent (its preset writes its config under a HOME the run
owns, in the container's state dir), starts it in its own process group in the work dir
(:mod:`.process`), with ``TMPDIR`` in the state dir too, and runs the turn
(:mod:`.session`) over a JSON-RPC connection on its stdio (:mod:`.connection`). Any
failure (the agent exits, stalls, breaks the protocol, or answers an error) ends the run
with its error code and the tail of the agent's stderr. Cancellation (SIGTERM, the runtime
cap): the session cancels the turn
(``session/cancel``, pending permissions answered ``cancelled``) within a short grace,
then the agent's whole process tree is killed and :class:`trio.Cancelled` propagates.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Final

import trio

from sandstream.core import AcpAgent

from ...context import RunContext
from ...errors import AgentError, ContainerError
from .connection import open_connection
from .continuation import wait_until_written
from .errors import AgentExitedError
from .presets import prepare
from .process import agent_process
from .session import AcpSession, TurnCancelled

__all__ = ["AGENTS_DIR_VAR", "run_acp"]

AGENTS_DIR_VAR: Final = "SANDSTREAM_AGENTS_DIR"
_STDERR_TAIL: Final = 2000


def _agents_dir(env: dict[str, str]) -> Path:
    if env.get(AGENTS_DIR_VAR):
        return Path(env[AGENTS_DIR_VAR])
    return Path(env.get("HOME", "~")).expanduser() / ".cache" / "sandstream" / "agents"


class _StderrTail:
    def __init__(self) -> None:
        self._data = bytearray()

    async def pump(self, stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some(65536):
            self._data += chunk
            if len(self._data) > 2 * _STDERR_TAIL:
                del self._data[:-_STDERR_TAIL]

    def text(self) -> str:
        return bytes(self._data[-_STDERR_TAIL:]).decode("utf-8", "replace").strip()


def _own_settings(agent_env: dict[str, str], run_env: dict[str, str]) -> dict[str, str]:
    """``agent_env`` less the run's own TMPDIR (the agent gets one the run removes), but
    with a TMPDIR the preset chose."""
    if agent_env.get("TMPDIR") == run_env.get("TMPDIR"):
        return {name: value for name, value in agent_env.items() if name != "TMPDIR"}
    return agent_env


async def run_acp(ctx: RunContext) -> str:
    """Run the turn; return the agent's message (see the module doc)."""
    spec = ctx.config.agent
    assert isinstance(spec, AcpAgent)
    home = ctx.home_dir
    scratch = ctx.state_dir / "acp-tmp"  # removed with the state dir, whatever the agent left
    scratch.mkdir(exist_ok=True)
    prepared = prepare(
        spec,
        env=ctx.env,
        home=home,
        work_dir=ctx.work_dir,
        model=ctx.config.model,
        agents_dir=_agents_dir(ctx.env),
    )
    ctx.unsaved.update(prepared.config_files)
    name = spec.preset or os.path.basename(prepared.command[0])
    ctx.emitter.log("info", f"acp agent: running {name}")
    session = AcpSession(
        ctx,
        agent=name,
        mode=prepared.mode,
        model=prepared.model,
        hidden_text=prepared.hidden_text,
        permission_timeout=spec.permission_timeout_sec,
        stall_timeout=spec.stall_timeout_sec,
    )
    stderr = _StderrTail()
    failure: ContainerError | TurnCancelled | None = None
    message = ""
    try:
        async with agent_process(
            prepared.command,
            cwd=ctx.work_dir,
            env={"TMPDIR": str(scratch), **_own_settings(prepared.env, ctx.env)},
            grace=ctx.kill_grace,
        ) as agent:
            process = agent.process
            turn_over = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stderr.pump, agent.stderr)
                nursery.start_soon(_cancel_when_cancelled, turn_over, session)
                with trio.CancelScope(shield=True):
                    async with open_connection(agent.stdin, agent.stdout, session) as rpc:
                        try:
                            message = await session.run(rpc)
                            if ctx.config.snapshot_max_bytes:  # its home is saved next
                                await wait_until_written(home)
                        except (ContainerError, TurnCancelled) as exc:
                            failure = exc
                turn_over.set()
                nursery.cancel_scope.cancel()
    except OSError as exc:
        raise AgentError(f"cannot start {name}: {exc}") from exc
    if isinstance(failure, TurnCancelled):
        await trio.lowlevel.checkpoint()  # an interrupt: Cancelled propagates from here
        raise AgentError(str(failure), code="cancelled")
    if isinstance(failure, AgentExitedError):
        failure = AgentExitedError(
            f"{name} {_exit_status(process.returncode)} before the turn ended"
        )
    if failure is not None:
        tail = stderr.text()
        if tail:
            failure.message = f"{failure.message} (agent stderr: {tail})"
            failure.args = (failure.message,)
        raise failure
    return message


def _exit_status(returncode: int | None) -> str:
    if returncode is None or returncode == 0:
        return "closed its output" if returncode is None else "exited"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


async def _cancel_when_cancelled(turn_over: trio.Event, session: AcpSession) -> None:
    """Turn the run's cancellation into the session's cancel (the session is shielded)."""
    try:
        await turn_over.wait()
    except trio.Cancelled:
        if not turn_over.is_set():
            session.request_cancel()
        raise
