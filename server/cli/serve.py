"""``sandstream serve``: the chat backend and the runner in one process, on embedded defaults.

Flags take their defaults from environment variables where the help names one
(``$SANDSTREAM_...``); flags win. A bad flag, setting or data dir is one line on stderr
and exit status 2, before anything listens. SIGINT/SIGTERM end live turns with
``error{code:"shutdown"}`` (persisted), every container is reaped, then it exits 0.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import psycopg
import trio
from hypercorn.config import Config

from sandstream.core import DEFAULT_MAX_STEP_BYTES, DEFAULT_MAX_STEPS
from sandstream.server.app import create_chat_app
from sandstream.server.chat.agent_profile import load_agent_profile
from sandstream.server.chat.config import ChatSettings
from sandstream.server.chat.credentials.api_token import (
    ApiToken,
    read_or_create_secret,
    resolve_api_token,
)
from sandstream.server.chat.errors import ChatConfigError, StoreError
from sandstream.server.chat.public_url import probe_public_url
from sandstream.server.chat.push.senders import load_credentials
from sandstream.server.chat.service import ChatService
from sandstream.server.chat.serving import serve_chat
from sandstream.server.chat.store.sql import PostgresChatStore, SqlChatStore, SQLiteChatStore
from sandstream.server.http.auth import TOKEN_ENV
from sandstream.server.http.serve import shutdown_signals
from sandstream.server.runner.launcher import ContainerLauncher
from sandstream.server.runner.service import Runner
from sandstream.server.runner.settings import DEFAULT_RUNTIME_CAP, RunnerSettings
from sandstream.server.sessions import SessionSettings

from .logs import configure_logging
from .options import (
    add_body_timeout_argument,
    add_container_arguments,
    add_observability_arguments,
    add_session_arguments,
    body_timeout,
    launcher_from_args,
    port,
    session_settings,
)
from .push_options import add_push_arguments, push_settings
from .running import hypercorn_config, run_server, serve_with_metrics

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_SERVE_PORT",
    "HELP",
    "RUNNER_TOKEN_FILE",
    "build_serve_parser",
    "serve_main",
]

HELP: Final = "serve the chat backend and runner"
"""The command's line in ``sandstream --help``."""
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
    """The command line; defaults come from ``environ`` (docs/configuration.md)."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s [OPTION ...] (--help lists them)",
        description="Serve the chat backend and the runner on embedded defaults.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (%(default)s)")
    parser.add_argument("--port", type=port, default=DEFAULT_SERVE_PORT, help="port (%(default)s)")
    parser.add_argument(
        "--data-dir",
        default=env.get("SANDSTREAM_DATA_DIR", DEFAULT_DATA_DIR),
        help="database, chat bag and saved tokens ($SANDSTREAM_DATA_DIR, %(default)s)",
    )
    parser.add_argument(
        "--public-url",
        default=env.get("SANDSTREAM_PUBLIC_URL") or None,
        help="base URL sandboxes call back, required with --redis-url or --database-url: the load "
        "balancer in front of the replicas ($SANDSTREAM_PUBLIC_URL; default: the bound "
        "address)",
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
        "--database-url",
        default=env.get("SANDSTREAM_DATABASE_URL") or None,
        metavar="URL",
        help="keep the chat store in PostgreSQL, e.g. postgresql://user@host/db, shared by "
        "replicas on many machines; the bag's files are kept there too "
        "($SANDSTREAM_DATABASE_URL; default: SQLite in the data dir)",
    )
    chat.add_argument(
        "--keep-chunks",
        action="store_true",
        default=env.get("SANDSTREAM_KEEP_CHUNKS", "") not in ("", "0"),
        help="also keep a copy of every chunk of a chat turn in the chat database (a turn "
        "then settles even if its runner dropped its chunks before; default: only the "
        "settled message, folded as the turn runs) ($SANDSTREAM_KEEP_CHUNKS=1)",
    )
    chat.add_argument(
        "--redis-url",
        default=env.get("SANDSTREAM_REDIS_URL") or None,
        metavar="URL",
        help="keep the log mover's leases in Redis (6 or newer), for several replicas: "
        "redis://[[user]:password@]host[:port][/db], or rediss://… for TLS "
        "($SANDSTREAM_REDIS_URL; default: in the chat database)",
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
    add_push_arguments(parser, env)
    add_observability_arguments(parser, env)
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
    metrics_bind: tuple[str, int] | None


def _database_url(url: str | None) -> str | None:
    """``--database-url`` checked for its form (nothing connects yet). Raises
    :class:`ValueError` for one that is not a ``postgresql://`` URL."""
    if url is None:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        raise ValueError("--database-url must be a postgresql:// URL")
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ValueError(f"--database-url is malformed: {_one_line(exc)}") from None
    return url


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _plan(args: argparse.Namespace, environ: Mapping[str, str]) -> _Plan:
    """Everything the server needs, validated before anything listens.

    Raises ChatConfigError / ValueError / OSError with a message for the user.
    """
    timeout = body_timeout(args)
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
        keep_chunks=args.keep_chunks,
        redis_url=args.redis_url,
        database_url=_database_url(args.database_url),
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
        push=push_settings(args),
    )
    load_credentials(settings.push)  # unreadable push credentials: refused before listening
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
        settings,
        runner_settings,
        sessions,
        launcher,
        api_token,
        config,
        timeout,
        args.metrics_bind,
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
    with shutdown_signals() as shutdown:
        await _serve_until(plan, shutdown)


async def _serve_until(plan: _Plan, shutdown: Callable[[], Awaitable[None]]) -> None:
    settings = plan.settings
    store: SqlChatStore
    if settings.database_url is not None:
        store = await PostgresChatStore.open(settings.database_url)
    else:
        store = await SQLiteChatStore.open(settings.data_dir)
    try:
        blobs = store.blob_store(settings.data_dir / "bag")
        await trio.to_thread.run_sync(blobs.ensure_dirs_sync)
        runner = None
        if plan.runner_settings is not None:
            runner = Runner(plan.runner_settings, plan.launcher)
        service = ChatService(settings, store, blobs, runner)
        app = create_chat_app(
            service, sessions=plan.sessions, metrics_route=plan.metrics_bind is None
        )
        app.config["BODY_TIMEOUT"] = plan.body_timeout
        server = partial(serve_chat, app, plan.config, shutdown_trigger=shutdown)
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(
                partial(serve_with_metrics, server, app, plan.metrics_bind)
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
            if settings.public_url is not None:
                nursery.start_soon(probe_public_url, settings.public_url)
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


def serve_main(argv: Sequence[str] | None = None) -> int:
    """``sandstream serve`` until SIGINT/SIGTERM; the exit status (2: bad configuration)."""
    args = build_serve_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        plan = _plan(args, os.environ)
    except (ChatConfigError, ValueError, OSError) as exc:
        print(f"sandstream serve: {exc}", file=sys.stderr)
        return 2
    _announce_token(plan.api_token)
    try:
        return run_server(
            "sandstream serve",
            plan.config,
            partial(_serve, plan),
            metrics_bind=plan.metrics_bind,
        )
    except (StoreError, sqlite3.Error, psycopg.Error) as exc:
        print(f"sandstream serve: the database cannot be used: {_one_line(exc)}", file=sys.stderr)
        return 2
