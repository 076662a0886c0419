"""One container run: bootstrap, workspace, setup, agent, writeback, one terminal line.

:func:`run_container` is the whole lifecycle (docs/container.md, "Lifecycle") in one
trio nursery. Bad input or a failing step: a :class:`~.errors.ContainerError` becomes
``error{code, message}``; any other exception is a bug (traceback to stderr,
``error{code:"internal_error"}``). Cancellation (SIGTERM/SIGINT) terminates the tools'
process groups, then ``error{code:"cancelled"}`` and exit ``128 + signum``; the runtime
cap ends the run with ``error{code:"runtime_exceeded"}``. Once the agent has started,
the chat's workspace is saved however the turn ends (:mod:`.workspace`; shielded, at
most ``save_timeout_sec``); nothing is written back after a cancellation or a failure.
Each one-time token is blanked in the dispatch once redeemed
(:func:`~.bootstrap.forget_token`).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final

import msgspec
import trio

from sandstream.core import (
    AcpAgent,
    ConfigResponse,
    Dispatch,
    Error,
    Result,
    agent_kind,
    gateway_env,
    split_provider_vars,
)

from .agents import agent_for
from .attachments import download_attachments
from .bootstrap import fetch_config, fetch_env, forget_token
from .context import RunContext
from .errors import ContainerError, OutputClosedError, RuntimeExceededError
from .http import HttpSettings, new_client
from .inbox import Inbox, read_messages
from .output import Emitter
from .procs import KILL_GRACE
from .setup_script import run_setup_script
from .skills import BUILTIN_SKILLS_DIR, SkillRegistry, SkillRunner, skill_env
from .tools import Toolbox
from .workspace import restore_workspace, save_workspace
from .writeback import write_back

__all__ = [
    "EXIT_BAD_DISPATCH",
    "EXIT_ERROR",
    "EXIT_OK",
    "RunDirs",
    "RunOptions",
    "run_container",
]

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_BAD_DISPATCH: Final = 2
SKILLS_PATH_VAR: Final = "SANDSTREAM_SKILLS_PATH"
SAVE_TIMEOUT_SEC: Final = 60.0
"""How long saving the chat's workspace may take after the agent ends, however it
ended (a cancelled or capped run included)."""


@dataclass(frozen=True)
class RunOptions:
    """Operator settings (command-line flags), as opposed to the workspace's config.

    ``work_dir`` None means a fresh temporary dir, removed after the run unless
    ``keep_work_dir``. ``max_runtime_sec`` caps the run below the config's cap.
    ``base_env`` (default: this process's environment) is what ``/env`` vars are
    applied on top of. ``messages``: where user messages arrive during the run
    (stdin after the dispatch, :mod:`.inbox`); ``None``: none do. ``save_timeout_sec``:
    how long saving the workspace may take after the agent ended.
    """

    work_dir: Path | None = None
    keep_work_dir: bool = False
    skill_dirs: tuple[Path, ...] = ()
    max_runtime_sec: float | None = None
    http: HttpSettings = field(default_factory=HttpSettings)
    kill_grace: float = KILL_GRACE
    handle_signals: bool = True
    base_env: Mapping[str, str] | None = None
    messages: BinaryIO | None = None
    save_timeout_sec: float = SAVE_TIMEOUT_SEC


class RunDirs:
    """The run's folders under one root: ``work`` (the tools' cwd; its ``output/`` is
    written back), ``home`` (the agent's home; saved with ``work`` for the chat's next
    turn) and ``state`` (the container's own: setup script, MCP config; never saved).

    The root is ``$TMPDIR/sandstream`` when that is free — a sandbox's own temp dir, so
    that every sandbox of a chat has the same paths (agents keep absolute paths in what
    they save) — else a fresh temporary dir. A given ``work_dir`` is the work dir. On
    exit the root is removed, and the work dir with it unless it was given or ``keep``.
    ``output/`` is made by :meth:`make_output`, once the work dir is restored.
    """

    def __init__(self, work_dir: Path | None, *, keep: bool = False) -> None:
        self._given = work_dir
        self._keep = keep
        self._root = Path()
        self.work = Path()
        self.home = Path()
        self.state = Path()

    @property
    def output(self) -> Path:
        return self.work / "output"

    @property
    def saved(self) -> dict[str, Path]:
        """The dirs a snapshot of the chat's workspace holds, by root name."""
        return {"work": self.work, "home": self.home}

    def make_output(self) -> None:
        self.output.mkdir(exist_ok=True)

    def __enter__(self) -> RunDirs:
        root = Path(tempfile.gettempdir()) / "sandstream"
        try:
            root.mkdir(mode=0o700)
        except OSError:
            root = Path(tempfile.mkdtemp(prefix="sandstream-run-"))
        self._root = root.resolve()
        self.home = self._root / "home"
        self.state = self._root / "state"
        self.home.mkdir()
        self.state.mkdir()
        self.work = self._given if self._given is not None else self._root / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.work = self.work.resolve()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._given is None and self._keep:
            shutil.rmtree(self.home, ignore_errors=True)
            shutil.rmtree(self.state, ignore_errors=True)
        else:
            shutil.rmtree(self._root, ignore_errors=True)


async def run_container(
    dispatch: Dispatch,
    emitter: Emitter,
    options: RunOptions | None = None,
    early_signals: list[int] | None = None,
) -> int:
    """Run one dispatch to its terminal line; return the process exit code.

    ``early_signals`` holds SIGTERM/SIGINT numbers received before this started (the
    CLI records them); any there, or arriving later, cancel the run. Signal handling
    needs the main thread; pass ``handle_signals=False`` in ``options`` elsewhere.
    """
    options = options or RunOptions()
    received = early_signals if early_signals is not None else []
    exit_code = EXIT_ERROR
    async with trio.open_nursery() as nursery:
        run_scope = trio.CancelScope()
        if options.handle_signals:
            await nursery.start(_watch_signals, run_scope, received)
        if received:
            run_scope.cancel()
        inbox = Inbox()
        if options.messages is not None:
            nursery.start_soon(read_messages, options.messages, inbox, emitter)
        with run_scope:
            exit_code = await _run_and_report(dispatch, emitter, options, inbox)
        nursery.cancel_scope.cancel()
    if received and not emitter.finished:
        name = signal.Signals(received[0]).name
        with contextlib.suppress(OutputClosedError):
            emitter.finish(Error(code="cancelled", message=f"run cancelled by {name}"))
        exit_code = 128 + received[0]
    return exit_code


async def _watch_signals(
    run_scope: trio.CancelScope,
    received: list[int],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            received.append(signum)
            run_scope.cancel()


async def _run_and_report(
    dispatch: Dispatch, emitter: Emitter, options: RunOptions, inbox: Inbox
) -> int:
    """Run the turn and write its terminal; cancellation propagates without one."""
    try:
        with RunDirs(options.work_dir, keep=options.keep_work_dir) as dirs:
            message = await _run_capped(dispatch, emitter, options, dirs, inbox)
    except BaseException as exc:
        leaves = [leaf for leaf in _leaves(exc) if not isinstance(leaf, trio.Cancelled)]
        if not leaves:
            raise
        return _report_failure(emitter, leaves)
    try:
        emitter.finish(Result(message=message))
    except OutputClosedError:
        return EXIT_ERROR
    return EXIT_OK


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _report_failure(emitter: Emitter, leaves: list[BaseException]) -> int:
    if any(isinstance(leaf, OutputClosedError) for leaf in leaves):
        return EXIT_ERROR
    problem = next((leaf for leaf in leaves if isinstance(leaf, ContainerError)), None)
    if problem is None:
        bug = leaves[0]
        if not isinstance(bug, Exception):
            raise bug  # KeyboardInterrupt, SystemExit: not ours to swallow
        traceback.print_exception(bug, file=sys.stderr)
        problem = ContainerError(f"internal error: {type(bug).__name__}: {bug}")
    with contextlib.suppress(OutputClosedError):
        emitter.finish(Error(code=problem.code, message=problem.message))
    return EXIT_ERROR


async def _run_capped(
    dispatch: Dispatch, emitter: Emitter, options: RunOptions, dirs: RunDirs, inbox: Inbox
) -> str:
    started = trio.current_time()
    operator_cap = options.max_runtime_sec if options.max_runtime_sec is not None else math.inf
    cap = operator_cap
    with trio.CancelScope(deadline=started + operator_cap) as cap_scope:

        def set_cap(config_cap: float) -> None:
            nonlocal cap
            cap = min(config_cap, operator_cap)
            cap_scope.deadline = started + cap

        return await _run_turn(dispatch, emitter, options, dirs, inbox, set_cap)
    raise RuntimeExceededError(f"the run exceeded its runtime cap of {cap:g}s")


async def _run_turn(
    dispatch: Dispatch,
    emitter: Emitter,
    options: RunOptions,
    dirs: RunDirs,
    inbox: Inbox,
    set_cap: Callable[[float], None],
) -> str:
    async with new_client(options.http) as client:
        env_response = await fetch_env(client, options.http, dispatch)
        forget_token(dispatch, "otp_setup")
        config = _without_provider_env(dispatch, await fetch_config(client, options.http, dispatch))
        set_cap(config.max_runtime_sec)
        emitter.log(
            "info",
            f"bootstrap: {len(env_response.vars)} env var(s), agent {agent_kind(config.agent)}",
        )
        await restore_workspace(client, options.http, dispatch, config, dirs.saved, emitter)
        dirs.make_output()
        await download_attachments(
            client,
            options.http,
            agent_url=dispatch.agent_url,
            token=dispatch.otp_run,
            attachments=config.attachments,
            work_dir=dirs.work,
            emitter=emitter,
        )
        forget_token(dispatch, "otp_run")
        base = dict(options.base_env if options.base_env is not None else os.environ)
        env = skill_env(
            {**base, **env_response.vars, **model_env(dispatch)},
            work_dir=dirs.work,
            output_dir=dirs.output,
        )
        await run_setup_script(
            env_response.setup_script,
            work_dir=dirs.work,
            state_dir=dirs.state,
            env=env,
            emitter=emitter,
            timeout=env_response.setup_timeout_sec,
            kill_grace=options.kill_grace,
        )
        registry = SkillRegistry.load(_skill_dirs(options, env, dirs.work)).select(config.skills)
        emitter.log("info", f"skills: {', '.join(registry.names()) or 'none'}")
        runner = SkillRunner(registry, work_dir=dirs.work, env=env, kill_grace=options.kill_grace)
        ctx = RunContext(
            dispatch=dispatch,
            config=config,
            env=env,
            work_dir=dirs.work,
            output_dir=dirs.output,
            state_dir=dirs.state,
            home_dir=dirs.home,
            emitter=emitter,
            toolbox=Toolbox(runner, emitter),
            http=options.http,
            kill_grace=options.kill_grace,
            inbox=inbox,
        )
        try:
            message = await agent_for(config.agent)(ctx)
        finally:
            with trio.CancelScope(shield=True) as saving:
                saving.deadline = trio.current_time() + options.save_timeout_sec
                await save_workspace(
                    client, options.http, dispatch, config, dirs.saved, emitter, ctx.unsaved
                )
        await write_back(
            client,
            options.http,
            agent_url=dispatch.agent_url,
            token=dispatch.otp_upload,
            output_dir=dirs.output,
            emitter=emitter,
        )
        forget_token(dispatch, "otp_upload")
        return message


def model_env(dispatch: Dispatch) -> dict[str, str]:
    """The provider variables of the run: with a model gateway, each served provider's
    keys set to the turn's credential and its base URL to the gateway's prefix for it
    (over the named environment's); without one, the dispatch's provider variables."""
    gateway = dispatch.gateway
    if gateway is None:
        return dict(dispatch.providers)
    return gateway_env(gateway.url, gateway.credential, gateway.providers)


def _without_provider_env(dispatch: Dispatch, config: ConfigResponse) -> ConfigResponse:
    """With a model gateway, an acp agent's own ``env`` loses its provider variables
    (they would override the gateway's)."""
    agent = config.agent
    if dispatch.gateway is None or not isinstance(agent, AcpAgent):
        return config
    kept, _ = split_provider_vars(agent.env)
    return msgspec.structs.replace(config, agent=msgspec.structs.replace(agent, env=kept))


def _skill_dirs(options: RunOptions, env: Mapping[str, str], work_dir: Path) -> list[Path]:
    dirs = [BUILTIN_SKILLS_DIR, *options.skill_dirs]
    for entry in env.get(SKILLS_PATH_VAR, "").split(os.pathsep):
        if entry.strip():
            dirs.append(work_dir / entry)  # an absolute entry replaces work_dir
    return dirs
