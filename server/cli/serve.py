"""``sandstream serve``: the chat backend and the runner in one process, on embedded defaults.

Flags take their defaults from environment variables where the help names one
(``$SANDSTREAM_...``); flags win. A bad flag, setting or data dir, a database or a
Redis that cannot be reached at start, is one line on stderr and exit status 2, before
anything listens (once listening, their outages are waited out: docs/deploy.md).
SIGINT/SIGTERM end running turns with ``error{code:"shutdown"}`` (persisted), every
container is reaped, then it exits 0.
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

from sandstream.core import provider_vars
from sandstream.server.app import create_chat_app
from sandstream.server.chat import serve_chat
from sandstream.server.chat.api import ChatService
from sandstream.server.chat.config import ChatSettings, probe_public_url
from sandstream.server.chat.credentials import ApiToken, read_or_create_secret, resolve_api_token
from sandstream.server.chat.model import (
    ChatConfigError,
    RedisLeaseError,
    StoreError,
    load_agent_profile,
)
from sandstream.server.chat.mover import check_redis, parse_redis_url
from sandstream.server.chat.push import PushSettings, load_credentials
from sandstream.server.chat.store import PostgresChatStore, SqlChatStore, SQLiteChatStore
from sandstream.server.http import TOKEN_ENV, shutdown_signals
from sandstream.server.runner import (
    SHUTDOWN_TIMEOUT,
    STALL_TIMEOUT,
    ContainerLauncher,
    Runner,
    RunnerSettings,
)
from sandstream.server.sessions import SessionSettings
from sandstream.server.settings_table import (
    Setting,
    add_settings,
    flags_of,
    from_args,
    settings_of,
)

from .logs import configure_logging
from .options import (
    BODY_TIMEOUT,
    CONTAINER_SETTINGS,
    HOST,
    LOG_LEVEL,
    OBSERVABILITY,
    SESSION_SETTINGS,
    body_timeout,
    launcher_from_args,
    port,
    session_settings,
)
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


PORT: Final = Setting(flag="--port", default=DEFAULT_SERVE_PORT, parse=port, help="port")
DATA_DIR: Final = Setting(
    flag="--data-dir",
    default=DEFAULT_DATA_DIR,
    env="SANDSTREAM_DATA_DIR",
    keep_blank=True,
    help="database, chat bag and saved tokens",
)
AGENT_CONFIG: Final = Setting(
    flag="--agent-config",
    parse=Path,
    env="SANDSTREAM_AGENT_CONFIG",
    metavar="FILE",
    help="a ConfigResponse JSON for every turn",
)
_CHAT_FLAGS: Final = (
    "lock_lease",
    "lock_heartbeat",
    "lease_ttl",
    "runner_lost_timeout",
    "database_url",
    "keep_chunks",
    "redis_url",
    "ping_interval",
    "replay_limit",
    "max_turn_steps",
    "max_turn_bytes",
    "turn_token_budget",
    "workspace_daily_token_budget",
    "sweep_interval",
    "cors_origins",
    "stream_token_ttl",
    "max_upload_bytes",
    "max_results_bytes",
    "snapshot_max_bytes",
    "snapshots_kept",
)
"""The chat group's flags of :class:`ChatSettings`, in order (``--stall-timeout`` and
``--body-timeout`` come after the first eight)."""
_CHAT: Final = settings_of(ChatSettings)
_RUNNER: Final = settings_of(RunnerSettings)


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
    options = (HOST, PORT, DATA_DIR, _CHAT["public_url"], SHUTDOWN_TIMEOUT, LOG_LEVEL)
    add_settings(parser, (*options, *OBSERVABILITY), env)
    runner = (
        *(_CHAT[name] for name in ("sandbox_url", "allowed_sandbox_urls", "embedded_runner")),
        _RUNNER["max_live"],
        _RUNNER["runtime_cap"],
        _RUNNER["model_gateway"],
        _RUNNER["provider_unavailable_after"],
        _RUNNER["warm_pool"],
        _RUNNER["warm_ttl"],
        *CONTAINER_SETTINGS,
        *SESSION_SETTINGS,
    )
    add_settings(parser.add_argument_group("runner"), runner, env)
    add_settings(parser.add_argument_group("agent"), (AGENT_CONFIG,), env)
    chat = (
        *(_CHAT[name] for name in _CHAT_FLAGS[:7]),
        STALL_TIMEOUT,
        BODY_TIMEOUT,
        *(_CHAT[name] for name in _CHAT_FLAGS[7:]),
    )
    add_settings(parser.add_argument_group("chat"), chat, env)
    push = parser.add_argument_group("push notifications (docs/push.md)")
    add_settings(push, flags_of(PushSettings), env)
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
    settings = from_args(
        ChatSettings,
        args,
        data_dir=data_dir,
        api_token=api_token.value,
        agent=load_agent_profile(environ, args.agent_config),
        runner_token=runner_token,
        push=from_args(PushSettings, args),
    )
    load_credentials(settings.push)  # unreadable push credentials: refused before listening
    if settings.redis_url is not None:
        parse_redis_url(settings.redis_url)  # malformed: ValueError, refused before listening
    runner_settings = None
    sessions = None
    launcher = None
    if settings.embedded_runner:
        runner_settings = from_args(
            RunnerSettings, args, token=runner_token, provider_env=provider_vars(os.environ)
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
    if settings.redis_url is not None:  # unreachable: refused before anything listens
        await check_redis(settings.redis_url)
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
    except RedisLeaseError as exc:
        print(f"sandstream serve: Redis cannot be used: {_one_line(exc)}", file=sys.stderr)
        return 2
