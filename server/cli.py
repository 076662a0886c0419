"""``sandstream runner`` and ``sandstream serve``: the server's two command lines.

``sandstream runner`` serves ``POST /stream`` (and, with ``--data-dir``, the durable
sessions, ``/sessions``) on Hypercorn's trio worker::

    SANDSTREAM_RUNNER_TOKEN=... sandstream runner --host 0.0.0.0 --port 8765 --data-dir ./data

The token comes from ``--token`` or ``$SANDSTREAM_RUNNER_TOKEN`` (prefer the
environment: a flag is visible in ``ps``); the runner refuses to start without one
unless ``--insecure-no-token`` is given. The access log (one JSON line per turn) goes
to stderr.

``sandstream serve`` is the whole system in one process, on embedded defaults::

    sandstream serve --host 127.0.0.1 --port 8080 --data-dir ./sandstream-data

One Quart-Trio app serves the chat backend (``/api/assistant/...``,
``/api/agents/run``, the sandbox callbacks) and the runner (``POST /stream``), with
SQLite and the chat bag in the data dir and turns run by the in-process runner. The
agent is the offline scripted demo with the bundled skills, or the OpenAI-compatible
agent when ``OPENAI_MODEL`` is set (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``), or the
``ConfigResponse`` of ``--agent-config``. The chat API token is
``$SANDSTREAM_API_TOKEN``, or generated on the first start, saved in the data dir and
printed once. ``$SANDSTREAM_RUNNER_TOKEN`` (else a token saved in the data dir) guards
``POST /stream`` and is sent to remote runners. Every flag and variable is in
docs/chat.md.

Both run each container in a bubblewrap sandbox (``--sandbox bwrap``, the default on
Linux when ``bwrap`` is installed; ``--sandbox-network``, ``--memory-limit``,
``--process-limit``, ``--cpu-limit``, ``--disk-limit``) or, for development only, as a
bare subprocess (``--sandbox local``, announced with a warning).

Both: SIGINT/SIGTERM end live turns with ``error{code:"shutdown"}`` (the chat backend
persists them), every container is reaped, then the process exits. An address that
cannot be bound (a port already in use) is one line on stderr and exit status 1.
``python -m sandstream.server.cli runner|serve ...`` runs them without the script.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import shlex
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import trio
from hypercorn.config import Config

from sandstream.core import DEFAULT_MAX_STEP_BYTES, DEFAULT_MAX_STEPS
from sandstream.core.cli import exit_quietly_on_broken_pipe
from sandstream.server.app import create_chat_app, create_runner_app
from sandstream.server.chat.agent_profile import load_agent_profile
from sandstream.server.chat.config import ChatSettings
from sandstream.server.chat.credentials.api_token import (
    ApiToken,
    read_or_create_secret,
    resolve_api_token,
)
from sandstream.server.chat.errors import ChatConfigError, StoreError
from sandstream.server.chat.service import ChatService
from sandstream.server.chat.serving import serve_chat
from sandstream.server.chat.store.bag import BlobStore
from sandstream.server.chat.store.sqlite import SQLiteChatStore
from sandstream.server.http.auth import TOKEN_ENV, resolve_token
from sandstream.server.http.errors import MissingTokenError
from sandstream.server.http.malloc import keep_large_buffers
from sandstream.server.http.serve import raise_open_file_limit, serve, wait_for_signals
from sandstream.server.runner.access_log import configure_access_log
from sandstream.server.runner.bwrap import BwrapLauncher, bwrap_available
from sandstream.server.runner.launcher import (
    DEFAULT_CONTAINER_ARGV,
    DEFAULT_KILL_GRACE,
    ContainerLauncher,
    LocalSubprocessLauncher,
)
from sandstream.server.runner.limits import ResourceLimits, parse_size
from sandstream.server.runner.routes import get_runner
from sandstream.server.runner.service import Runner
from sandstream.server.runner.settings import DEFAULT_RUNTIME_CAP, RunnerSettings
from sandstream.server.sessions.settings import SessionSettings

__all__ = [
    "add_container_arguments",
    "add_session_arguments",
    "build_runner_parser",
    "build_serve_parser",
    "hypercorn_config",
    "launcher_from_args",
    "main",
    "runner_main",
    "serve_main",
    "session_settings",
]

DEFAULT_RUNNER_PORT: Final = 8765
DEFAULT_BODY_TIMEOUT: Final = 60.0
"""Seconds a request body may take to arrive (Quart's ``BODY_TIMEOUT``)."""


def build_runner_parser(prog: str = "sandstream runner") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run sandbox containers and stream their NDJSON envelope (POST /stream).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_RUNNER_PORT, help="port (default %(default)s)"
    )
    auth = parser.add_argument_group("authentication")
    auth.add_argument(
        "--token", help="runner bearer token (default: $SANDSTREAM_RUNNER_TOKEN; visible in ps)"
    )
    auth.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="accept POST /stream without a token (local development only)",
    )
    limits = parser.add_argument_group("limits")
    limits.add_argument("--max-live", type=int, default=64, help="containers at once (503 beyond)")
    limits.add_argument("--retry-after", type=int, default=5, help="Retry-After seconds on 503")
    limits.add_argument(
        "--runtime-cap", type=float, default=DEFAULT_RUNTIME_CAP, help="seconds per turn (8 h)"
    )
    limits.add_argument(
        "--stall-timeout",
        type=float,
        default=60.0,
        help="end a turn whose client has not read for this many seconds (0: never)",
    )
    limits.add_argument(
        "--shutdown-timeout",
        type=float,
        default=10.0,
        help="seconds live turns get to deliver their last line on shutdown",
    )
    add_body_timeout_argument(limits)
    limits.add_argument(
        "--read-size",
        type=int,
        default=256 * 1024,
        help="bytes asked of a container's stdout per read; one read is one write (256 KiB)",
    )
    add_container_arguments(parser.add_argument_group("container"))
    sessions = parser.add_argument_group("durable sessions")
    sessions.add_argument(
        "--data-dir",
        type=Path,
        help="the session buffer's directory; without it /sessions is not served",
    )
    add_session_arguments(sessions)
    parser.add_argument("--log-level", default="info", help="server log level (default: info)")
    return parser


def add_session_arguments(group: argparse._ActionsContainer) -> None:
    """The flags that say how long the session buffer keeps chunks."""
    group.add_argument(
        "--session-retain-chunks",
        type=int,
        default=None,
        metavar="N",
        help="keep at most the newest N chunks of each session (default: all)",
    )
    group.add_argument(
        "--session-ttl",
        type=float,
        default=7 * 24 * 3600.0,
        metavar="SEC",
        help="delete a session this long after it ended (default: 7 days; 0: never)",
    )


def session_settings(data_dir: Path, args: argparse.Namespace) -> SessionSettings:
    """The :class:`SessionSettings` of :func:`add_session_arguments`' flags."""
    return SessionSettings(
        data_dir=data_dir,
        retain_chunks=args.session_retain_chunks,
        ttl=args.session_ttl or None,
    )


def add_body_timeout_argument(group: argparse._ActionsContainer) -> None:
    """``--body-timeout``: the seconds a request body may take to arrive (408 after)."""
    group.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULT_BODY_TIMEOUT,
        help="seconds a request body may take to arrive in full (408 after; default 60)",
    )


def add_container_arguments(group: argparse._ActionsContainer) -> None:
    """The flags that say how containers are sandboxed, launched and stopped."""
    default_limits = ResourceLimits()
    group.add_argument(
        "--sandbox",
        choices=("bwrap", "local"),
        default=None,
        help="bwrap: each container in a bubblewrap sandbox (the default on Linux when "
        "bwrap is installed); local: a bare subprocess that isolates nothing (development)",
    )
    group.add_argument(
        "--sandbox-network",
        choices=("on", "off"),
        default="on",
        help="bwrap: the host's network, or loopback only (default: %(default)s)",
    )
    group.add_argument(
        "--memory-limit",
        type=_size,
        default=default_limits.memory_bytes,
        metavar="SIZE",
        help="bwrap: memory of one sandbox, e.g. 512M, 2G, none (default: 2G)",
    )
    group.add_argument(
        "--process-limit",
        type=_optional_int,
        default=default_limits.processes,
        metavar="N",
        help="bwrap: processes alive at once in one sandbox, or none (default: %(default)s)",
    )
    group.add_argument(
        "--cpu-limit",
        type=_optional_float,
        default=default_limits.cpu_seconds,
        metavar="SECONDS",
        help="bwrap: CPU time of one sandbox, or none (default: none)",
    )
    group.add_argument(
        "--disk-limit",
        type=_size,
        default=default_limits.disk_bytes,
        metavar="SIZE",
        help="bwrap: size of a sandbox's writable /tmp (work dir), or none (default: 1G)",
    )
    group.add_argument(
        "--container-cmd",
        default=shlex.join(DEFAULT_CONTAINER_ARGV),
        help="command that runs one container; dispatch JSON on its stdin (default: %(default)s)",
    )
    group.add_argument(
        "--container-stderr",
        choices=("log", "inherit", "discard"),
        default="log",
        help="what to do with a container's stderr (default: %(default)s)",
    )
    group.add_argument(
        "--kill-grace",
        type=float,
        default=DEFAULT_KILL_GRACE,
        help="local: seconds between SIGTERM and SIGKILL when a container is stopped",
    )


def _size(text: str) -> int | None:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _optional_int(text: str) -> int | None:
    if text.strip().lower() in ("none", "0", "unlimited"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (use e.g. 512, or none)") from None


def _optional_float(text: str) -> float | None:
    if text.strip().lower() in ("none", "0", "unlimited"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not seconds: {text!r} (use e.g. 60, or none)") from None


def launcher_from_args(
    args: argparse.Namespace, *, hidden_paths: Sequence[str] = ()
) -> ContainerLauncher:
    """The launcher :func:`add_container_arguments`' flags describe (``ValueError`` if bad).

    ``hidden_paths`` (the data dir) are never visible inside a bwrap sandbox. Without
    ``--sandbox``, bwrap is used when it is installed (Linux), else ``local``. The
    ``local`` launcher is announced with a warning: it isolates nothing.
    """
    argv = shlex.split(args.container_cmd)
    sandbox = args.sandbox or ("bwrap" if bwrap_available() else "local")
    if sandbox == "bwrap":
        limits = ResourceLimits(
            memory_bytes=args.memory_limit,
            processes=args.process_limit,
            cpu_seconds=args.cpu_limit,
            disk_bytes=args.disk_limit,
        )
        launcher = BwrapLauncher(
            argv=argv,
            network=args.sandbox_network == "on",
            limits=limits,
            hidden_paths=hidden_paths,
            stderr=args.container_stderr,
        )
        logging.getLogger("sandstream.runner").debug(
            "sandbox: bwrap (network %s; limits: %s; enforced by %s)",
            args.sandbox_network,
            limits,
            f"cgroup v{launcher.cgroups.version}" if launcher.cgroups else "/proc polling",
        )
        return launcher
    logging.getLogger("sandstream.runner").warning(
        "sandbox: local — containers run as plain subprocesses with this server's user, "
        "files and network; they are NOT isolated and can outlive their turn "
        "(development only; install bubblewrap and use --sandbox bwrap)"
    )
    return LocalSubprocessLauncher(
        argv=argv,
        kill_grace=args.kill_grace,
        stderr=args.container_stderr,
    )


def hypercorn_config(host: str, port: int) -> Config:
    """Hypercorn bound to ``host:port``; its log goes through logging, once per line."""
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.backlog = 1024  # session readers reconnect in bursts (Hypercorn's default: 100)
    config.accesslog = None  # one structured record per turn instead (sandstream.access)
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


def runner_main(argv: Sequence[str] | None = None) -> int:
    """``sandstream runner`` until SIGINT/SIGTERM; the exit status (2: bad configuration)."""
    parser = build_runner_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    configure_access_log()
    try:
        token = resolve_token(args.token, insecure_no_token=args.insecure_no_token)
        settings = RunnerSettings(
            token=token,
            max_live=args.max_live,
            retry_after=args.retry_after,
            runtime_cap=args.runtime_cap,
            stall_timeout=args.stall_timeout or None,
            shutdown_timeout=args.shutdown_timeout,
            read_size=args.read_size,
        )
        sessions = (
            None
            if args.data_dir is None
            else session_settings(args.data_dir.expanduser().resolve(), args)
        )
        hidden = [] if args.data_dir is None else [str(args.data_dir.expanduser().resolve())]
        launcher = launcher_from_args(args, hidden_paths=hidden)
        if not args.body_timeout > 0:
            raise ValueError("--body-timeout must be > 0")
    except (MissingTokenError, ValueError) as exc:
        print(f"sandstream runner: {exc}", file=sys.stderr)
        return 2
    if token is None:
        logging.getLogger("sandstream.runner").warning(
            "running WITHOUT authentication (--insecure-no-token): anyone who can reach "
            "this port can run containers"
        )
    config = hypercorn_config(args.host, args.port)
    app = create_runner_app(settings, sessions=sessions, launcher=launcher)
    app.config["BODY_TIMEOUT"] = args.body_timeout
    raise_open_file_limit()
    keep_large_buffers()
    drain = get_runner(app).shutdown
    return _run_server(
        "sandstream runner",
        config,
        partial(serve, app, config, shutdown_trigger=wait_for_signals, drain=drain),
    )


def _run_server(command: str, config: Config, server: Callable[[], Awaitable[object]]) -> int:
    """``trio.run(server)``; 0 when it ends, 1 with one line on stderr for an ``OSError``.

    The ``OSError`` may come wrapped in trio's exception groups (a port already in use
    is raised from Hypercorn's nurseries): it is still one line, never a traceback.
    A ``BrokenPipeError`` (stdout's reader left) and anything else propagate.
    """
    try:
        trio.run(server)
    except (OSError, BaseExceptionGroup) as exc:
        error = _sole_os_error(exc)
        if error is None or isinstance(error, BrokenPipeError):
            raise
        if error.errno == errno.EADDRINUSE:
            print(f"{command}: {', '.join(config.bind)} is already in use", file=sys.stderr)
        else:
            print(f"{command}: {error}", file=sys.stderr)
        return 1
    return 0


def _sole_os_error(exc: BaseException) -> OSError | None:
    """The first ``OSError`` in ``exc`` if every exception in it is one, else ``None``."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup) and exc.split(OSError)[1] is None:
        return _sole_os_error(exc.exceptions[0])
    return None


DEFAULT_SERVE_PORT: Final = 8080
DEFAULT_DATA_DIR: Final = "sandstream-data"
RUNNER_TOKEN_FILE: Final = "runner-token"


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    return default if raw in (None, "") else float(raw)


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    return default if raw in (None, "") else int(raw)


def build_serve_parser(
    environ: Mapping[str, str] | None = None, prog: str = "sandstream serve"
) -> argparse.ArgumentParser:
    """The command line; defaults come from ``environ`` (docs/chat.md)."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve the chat backend and the runner on embedded defaults.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (%(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_SERVE_PORT, help="port (%(default)s)")
    parser.add_argument(
        "--data-dir",
        default=env.get("SANDSTREAM_DATA_DIR", DEFAULT_DATA_DIR),
        help="database, chat bag and saved tokens ($SANDSTREAM_DATA_DIR, %(default)s)",
    )
    parser.add_argument(
        "--public-url",
        default=env.get("SANDSTREAM_PUBLIC_URL") or None,
        help="base URL sandboxes call back ($SANDSTREAM_PUBLIC_URL; default: the bound address)",
    )
    runner = parser.add_argument_group("runner")
    runner.add_argument(
        "--sandbox-url",
        default=env.get("SANDBOX_URL") or None,
        help="a remote runner's base URL for every turn ($SANDBOX_URL; default: embedded)",
    )
    runner.add_argument(
        "--allowed-sandbox-url",
        action="append",
        default=[u for u in env.get("SANDSTREAM_ALLOWED_SANDBOX_URLS", "").split(",") if u.strip()],
        metavar="URL",
        help="a runner a request or workflow may name (repeatable; "
        "$SANDSTREAM_ALLOWED_SANDBOX_URLS, comma-separated)",
    )
    runner.add_argument(
        "--no-embedded-runner",
        action="store_true",
        help="do not run containers here (then --sandbox-url is required)",
    )
    runner.add_argument("--max-live", type=int, default=64, help="containers at once (64)")
    runner.add_argument(
        "--runtime-cap", type=float, default=DEFAULT_RUNTIME_CAP, help="seconds per turn (8 h)"
    )
    add_container_arguments(runner)
    add_session_arguments(runner)
    agent = parser.add_argument_group("agent")
    agent.add_argument(
        "--agent-config",
        type=Path,
        default=Path(env["SANDSTREAM_AGENT_CONFIG"])
        if env.get("SANDSTREAM_AGENT_CONFIG")
        else None,
        metavar="FILE",
        help="a ConfigResponse JSON for every turn ($SANDSTREAM_AGENT_CONFIG)",
    )
    chat = parser.add_argument_group("chat")
    chat.add_argument(
        "--lock-lease",
        type=float,
        default=_env_float(env, "SANDSTREAM_LOCK_LEASE", 30.0),
        help="seconds a chat lock lives without a heartbeat ($SANDSTREAM_LOCK_LEASE, 30)",
    )
    chat.add_argument(
        "--lock-heartbeat",
        type=float,
        default=_env_float(env, "SANDSTREAM_LOCK_HEARTBEAT", 10.0),
        help="seconds between renewals of the log mover's leases and the chat locks; "
        "also the mover's sweep interval ($SANDSTREAM_LOCK_HEARTBEAT, 10)",
    )
    chat.add_argument(
        "--lease-ttl",
        type=float,
        default=_env_float(env, "SANDSTREAM_LEASE_TTL", 30.0),
        help="seconds a replica's log mover lease on a session lives without renewal: "
        "another replica takes the session over after it ($SANDSTREAM_LEASE_TTL, 30)",
    )
    chat.add_argument(
        "--redis-url",
        default=env.get("SANDSTREAM_REDIS_URL") or None,
        metavar="URL",
        help="keep the log mover's leases in Redis, e.g. redis://127.0.0.1:6379/0, for "
        "several replicas ($SANDSTREAM_REDIS_URL; default: in the chat database)",
    )
    chat.add_argument(
        "--ping-interval",
        type=float,
        default=_env_float(env, "SANDSTREAM_PING_INTERVAL", 15.0),
        help="idle seconds before an SSE ': ping' ($SANDSTREAM_PING_INTERVAL, 15)",
    )
    chat.add_argument(
        "--stall-timeout",
        type=float,
        default=60.0,
        help="cut a client that has not read for this many seconds (0: never; 60)",
    )
    add_body_timeout_argument(chat)
    chat.add_argument(
        "--replay-limit", type=int, default=20, help="past messages sent to the sandbox (20)"
    )
    chat.add_argument(
        "--max-turn-steps",
        type=int,
        default=_env_int(env, "SANDSTREAM_MAX_TURN_STEPS", DEFAULT_MAX_STEPS),
        help="steps a turn keeps and stores; later ones stream and are counted "
        f"($SANDSTREAM_MAX_TURN_STEPS, {DEFAULT_MAX_STEPS})",
    )
    chat.add_argument(
        "--max-turn-bytes",
        type=int,
        default=_env_int(env, "SANDSTREAM_MAX_TURN_BYTES", DEFAULT_MAX_STEP_BYTES),
        help="bytes of step lines a turn keeps and stores "
        f"($SANDSTREAM_MAX_TURN_BYTES, {DEFAULT_MAX_STEP_BYTES // (1024 * 1024)} MiB)",
    )
    chat.add_argument(
        "--sweep-interval",
        type=float,
        default=_env_float(env, "SANDSTREAM_SWEEP_INTERVAL", 30.0),
        help="seconds between sweeps settling turns whose lock expired "
        "($SANDSTREAM_SWEEP_INTERVAL, 30)",
    )
    chat.add_argument(
        "--cors-origin",
        action="append",
        default=[o for o in env.get("SANDSTREAM_CORS_ORIGINS", "").split(",") if o.strip()],
        metavar="ORIGIN",
        help="a browser origin allowed to call the API, e.g. https://app.example.com, or * "
        "(repeatable; $SANDSTREAM_CORS_ORIGINS, comma-separated; default: none)",
    )
    chat.add_argument(
        "--stream-token-ttl",
        type=float,
        default=_env_float(env, "SANDSTREAM_STREAM_TOKEN_TTL", 300.0),
        help="seconds a stream token (EventSource auth) is valid "
        "($SANDSTREAM_STREAM_TOKEN_TTL, 300)",
    )
    chat.add_argument(
        "--max-upload-bytes",
        type=int,
        default=32 * 1024 * 1024,
        help="bytes of files in one upload to a chat bag (32 MiB)",
    )
    chat.add_argument(
        "--max-results-bytes",
        type=int,
        default=128 * 1024 * 1024,
        help="bytes of files one run may write back (128 MiB)",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=10.0,
        help="seconds live turns get to end on shutdown (10)",
    )
    parser.add_argument("--log-level", default="info", help="log level (info)")
    return parser


@dataclass(frozen=True)
class _Plan:
    settings: ChatSettings
    runner_settings: RunnerSettings | None
    sessions: SessionSettings | None
    launcher: ContainerLauncher | None
    api_token: ApiToken
    config: Config
    body_timeout: float


def _plan(args: argparse.Namespace, environ: Mapping[str, str]) -> _Plan:
    """Everything the server needs, validated before anything listens.

    Raises ChatConfigError / ValueError / OSError with a message for the user.
    """
    if not args.body_timeout > 0:
        raise ValueError("--body-timeout must be > 0")
    data_dir = Path(args.data_dir).expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    api_token = resolve_api_token(environ, data_dir)
    runner_token = environ.get(TOKEN_ENV) or None
    if runner_token is None:
        runner_token, _ = read_or_create_secret(data_dir / RUNNER_TOKEN_FILE)
    embedded = not args.no_embedded_runner
    settings = ChatSettings(
        data_dir=data_dir,
        api_token=api_token.value,
        agent=load_agent_profile(environ, args.agent_config),
        public_url=args.public_url,
        sandbox_url=args.sandbox_url,
        runner_token=runner_token,
        allowed_sandbox_urls=frozenset(u.strip() for u in args.allowed_sandbox_url),
        embedded_runner=embedded,
        lock_lease=args.lock_lease,
        lock_heartbeat=args.lock_heartbeat,
        lease_ttl=args.lease_ttl,
        redis_url=args.redis_url,
        ping_interval=args.ping_interval,
        stall_timeout=args.stall_timeout or None,
        replay_limit=args.replay_limit,
        max_turn_steps=args.max_turn_steps,
        max_turn_bytes=args.max_turn_bytes,
        sweep_interval=args.sweep_interval,
        max_upload_bytes=args.max_upload_bytes,
        max_results_bytes=args.max_results_bytes,
        shutdown_timeout=args.shutdown_timeout,
        cors_origins=frozenset(o.strip() for o in args.cors_origin),
        stream_token_ttl=args.stream_token_ttl,
    )
    runner_settings = None
    sessions = None
    launcher = None
    if embedded:
        runner_settings = RunnerSettings(
            token=runner_token,
            max_live=args.max_live,
            runtime_cap=args.runtime_cap,
            stall_timeout=args.stall_timeout or None,
            shutdown_timeout=args.shutdown_timeout,
        )
        sessions = session_settings(data_dir, args)
        launcher = launcher_from_args(args, hidden_paths=[str(data_dir)])
    config = hypercorn_config(args.host, args.port)
    return _Plan(
        settings, runner_settings, sessions, launcher, api_token, config, args.body_timeout
    )


def _announce_token(token: ApiToken) -> None:
    if token.source == "generated":
        print(
            f"sandstream serve: generated the chat API token (saved in {token.path}):\n"
            f"  {token.value}\n"
            "  send it as 'Authorization: Bearer <token>'; set SANDSTREAM_API_TOKEN to choose one",
            flush=True,
        )
    elif token.source == "file":
        print(f"sandstream serve: chat API token in {token.path}", flush=True)
    else:
        print("sandstream serve: chat API token from SANDSTREAM_API_TOKEN", flush=True)


async def _serve(plan: _Plan) -> None:
    settings = plan.settings
    store = await SQLiteChatStore.open(settings.data_dir)
    try:
        blobs = BlobStore(settings.data_dir / "bag")
        await trio.to_thread.run_sync(blobs.ensure_dirs_sync)
        runner = None
        if plan.runner_settings is not None:
            runner = Runner(plan.runner_settings, plan.launcher)
        service = ChatService(settings, store, blobs, runner)
        app = create_chat_app(service, sessions=plan.sessions)
        app.config["BODY_TIMEOUT"] = plan.body_timeout
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(
                partial(serve_chat, app, plan.config, shutdown_trigger=wait_for_signals)
            )
            where = (
                "embedded runner" if runner is not None else f"remote runner {settings.sandbox_url}"
            )
            print(
                f"sandstream serve: listening on {binds[0]} (data {settings.data_dir}; {where}; "
                f"agent: {settings.agent.description}; callbacks via "
                f"{settings.public_url or service.bound_url})",
                flush=True,
            )
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


def serve_main(argv: Sequence[str] | None = None) -> int:
    """``sandstream serve`` until SIGINT/SIGTERM; the exit status (2: bad configuration)."""
    args = build_serve_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    configure_access_log()
    try:
        plan = _plan(args, os.environ)
    except (ChatConfigError, ValueError, OSError) as exc:
        print(f"sandstream serve: {exc}", file=sys.stderr)
        return 2
    _announce_token(plan.api_token)
    raise_open_file_limit()
    keep_large_buffers()
    try:
        return _run_server("sandstream serve", plan.config, partial(_serve, plan))
    except (StoreError, sqlite3.Error) as exc:
        print(f"sandstream serve: the database cannot be used: {exc}", file=sys.stderr)
        return 2


COMMANDS: Final = {"runner": runner_main, "serve": serve_main}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sandstream.server.cli runner|serve ARGS``; 2 on an unknown command."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print("usage: python -m sandstream.server.cli {runner,serve} ...", file=sys.stderr)
        return 2
    return exit_quietly_on_broken_pipe(partial(COMMANDS[args[0]], args[1:]))


if __name__ == "__main__":
    sys.exit(main())
