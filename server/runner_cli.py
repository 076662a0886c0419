"""``sandstream runner``: serve ``POST /stream`` on Hypercorn's trio worker.

    SANDSTREAM_RUNNER_TOKEN=... sandstream runner --host 0.0.0.0 --port 8765

The token comes from ``--token`` or ``$SANDSTREAM_RUNNER_TOKEN`` (prefer the
environment: a flag is visible in ``ps``); the runner refuses to start without one
unless ``--insecure-no-token`` is given. SIGINT/SIGTERM shut it down: live turns end
with ``error{code:"shutdown"}`` and every container is reaped before it exits.
The access log (one JSON line per turn) goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from functools import partial

import trio
from hypercorn.config import Config

from .access_log import configure_access_log
from .app import create_app
from .auth import MissingTokenError, resolve_token
from .launcher import DEFAULT_CONTAINER_ARGV, DEFAULT_KILL_GRACE, LocalSubprocessLauncher
from .serve import serve, wait_for_signals
from .settings import DEFAULT_RUNTIME_CAP, RunnerSettings

__all__ = [
    "add_container_arguments",
    "build_parser",
    "hypercorn_config",
    "launcher_from_args",
    "main",
]

DEFAULT_PORT = 8765


def build_parser(prog: str = "sandstream runner") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run sandbox containers and stream their NDJSON envelope (POST /stream).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s)")
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
    limits.add_argument(
        "--read-size",
        type=int,
        default=256 * 1024,
        help="bytes asked of a container's stdout per read; one read is one write (256 KiB)",
    )
    add_container_arguments(parser.add_argument_group("container"))
    parser.add_argument("--log-level", default="info", help="server log level (default: info)")
    return parser


def add_container_arguments(group: argparse._ActionsContainer) -> None:
    """The flags that say how containers are launched and stopped."""
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
        help="seconds between SIGTERM and SIGKILL when a container is stopped",
    )


def launcher_from_args(args: argparse.Namespace) -> LocalSubprocessLauncher:
    """The launcher :func:`add_container_arguments`' flags describe (``ValueError`` if bad)."""
    return LocalSubprocessLauncher(
        argv=shlex.split(args.container_cmd),
        kill_grace=args.kill_grace,
        stderr=args.container_stderr,
    )


def hypercorn_config(host: str, port: int) -> Config:
    """Hypercorn bound to ``host:port``; its log goes through logging, once per line."""
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None  # one structured record per turn instead (sandstream.access)
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Run the runner until SIGINT/SIGTERM; return the exit status (2: bad configuration)."""
    parser = build_parser()
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
        launcher = launcher_from_args(args)
    except (MissingTokenError, ValueError) as exc:
        print(f"sandstream runner: {exc}", file=sys.stderr)
        return 2
    if token is None:
        logging.getLogger("sandstream.runner").warning(
            "running WITHOUT authentication (--insecure-no-token): anyone who can reach "
            "this port can run containers"
        )
    config = hypercorn_config(args.host, args.port)
    app = create_app(settings, launcher=launcher)
    try:
        trio.run(partial(serve, app, config, shutdown_trigger=wait_for_signals))
    except OSError as exc:
        print(f"sandstream runner: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
