"""``sandstream serve``: the whole system in one process, on embedded defaults.

    sandstream serve --host 127.0.0.1 --port 8080 --data-dir ./sandstream-data

One Quart-Trio app on Hypercorn serves the chat backend (``/api/assistant/...``,
``/api/agents/run``, the sandbox callbacks) and the runner (``POST /stream``), with
SQLite and the chat bag in the data dir and turns run by the in-process runner. The
agent is the offline scripted demo with the bundled skills, or the OpenAI-compatible
agent when ``OPENAI_MODEL`` is set (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``), or the
``ConfigResponse`` of ``--agent-config``.

The chat API token is ``$SANDSTREAM_API_TOKEN``, or generated on the first start,
saved in the data dir and printed once. ``$SANDSTREAM_RUNNER_TOKEN`` (else a token
saved in the data dir) guards ``POST /stream`` and is sent to remote runners.
SIGINT/SIGTERM: live turns end with ``error{code:"shutdown"}`` and are persisted,
containers are reaped, then the server exits. Every flag and variable is in
docs/chat.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import trio
from hypercorn.config import Config

from .access_log import configure_access_log
from .auth import TOKEN_ENV
from .chat.agent import load_agent_profile
from .chat.app import create_chat_app, serve_chat
from .chat.auth import ApiToken, read_or_create_secret, resolve_api_token
from .chat.bag import BlobStore
from .chat.config import ChatSettings
from .chat.errors import ChatConfigError, StoreError
from .chat.service import ChatService
from .chat.sqlite_store import SQLiteChatStore
from .launcher import LocalSubprocessLauncher
from .runner import Runner
from .runner_cli import add_container_arguments, hypercorn_config, launcher_from_args
from .serve import wait_for_signals
from .settings import DEFAULT_RUNTIME_CAP, RunnerSettings

__all__ = ["build_parser", "main"]

DEFAULT_PORT: Final = 8080
DEFAULT_DATA_DIR: Final = "sandstream-data"
RUNNER_TOKEN_FILE: Final = "runner-token"


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    return default if raw in (None, "") else float(raw)


def build_parser(
    environ: Mapping[str, str] | None = None, prog: str = "sandstream serve"
) -> argparse.ArgumentParser:
    """The command line; defaults come from ``environ`` (docs/chat.md)."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve the chat backend and the runner on embedded defaults.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (%(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (%(default)s)")
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
        help="seconds between lock renewals ($SANDSTREAM_LOCK_HEARTBEAT, 10)",
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
    chat.add_argument(
        "--replay-limit", type=int, default=20, help="past messages sent to the sandbox (20)"
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
    launcher: LocalSubprocessLauncher | None
    api_token: ApiToken
    config: Config


def _plan(args: argparse.Namespace, environ: Mapping[str, str]) -> _Plan:
    """Everything the server needs, validated before anything listens.

    Raises ChatConfigError / ValueError / OSError with a message for the user.
    """
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
        ping_interval=args.ping_interval,
        stall_timeout=args.stall_timeout or None,
        replay_limit=args.replay_limit,
        max_upload_bytes=args.max_upload_bytes,
        max_results_bytes=args.max_results_bytes,
        shutdown_timeout=args.shutdown_timeout,
    )
    runner_settings = None
    launcher = None
    if embedded:
        runner_settings = RunnerSettings(
            token=runner_token,
            max_live=args.max_live,
            runtime_cap=args.runtime_cap,
            stall_timeout=args.stall_timeout or None,
            shutdown_timeout=args.shutdown_timeout,
        )
        launcher = launcher_from_args(args)
    return _Plan(
        settings, runner_settings, launcher, api_token, hypercorn_config(args.host, args.port)
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
        app = create_chat_app(service)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGINT/SIGTERM; the exit status (2: bad configuration)."""
    args = build_parser().parse_args(argv)
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
    try:
        trio.run(_serve, plan)
    except (StoreError, sqlite3.Error) as exc:
        print(f"sandstream serve: the database cannot be used: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sandstream serve: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
