"""``sandstream runner``: serve ``POST /stream`` (and, with ``--data-dir``, ``/sessions``).

The token comes from ``--token`` or ``$SANDSTREAM_RUNNER_TOKEN``; without one the
runner refuses to start unless ``--insecure-no-token`` is given. A bad flag or setting
is one line on stderr and exit status 2. SIGINT/SIGTERM end live turns with
``error{code:"shutdown"}``, every container is reaped, then the process exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Final

from sandstream.server.app import create_runner_app
from sandstream.server.http.auth import resolve_token
from sandstream.server.http.errors import MissingTokenError
from sandstream.server.http.serve import serve, shutdown_signals
from sandstream.server.runner.routes import get_runner
from sandstream.server.runner.settings import DEFAULT_RUNTIME_CAP, RunnerSettings

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
from .running import hypercorn_config, run_server, serve_with_metrics

__all__ = ["DEFAULT_RUNNER_PORT", "HELP", "build_runner_parser", "runner_main"]

HELP: Final = "serve POST /stream"
"""The command's line in ``sandstream --help``."""
DEFAULT_RUNNER_PORT: Final = 8765


def build_runner_parser(
    prog: str = "sandstream runner", environ: Mapping[str, str] | None = None
) -> argparse.ArgumentParser:
    """The command line of ``sandstream runner``; defaults from ``environ`` (default
    ``os.environ``) where the help names a variable."""
    parser = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s [OPTION ...] (--help lists them)",
        description="Run sandbox containers and stream their NDJSON envelope (POST /stream).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port", type=port, default=DEFAULT_RUNNER_PORT, help="port (default %(default)s)"
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
    add_observability_arguments(parser, os.environ if environ is None else environ)
    return parser


def runner_main(argv: Sequence[str] | None = None) -> int:
    """``sandstream runner`` until SIGINT/SIGTERM; the exit status (2: bad configuration)."""
    args = build_runner_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
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
        timeout = body_timeout(args)
    except (MissingTokenError, ValueError) as exc:
        print(f"sandstream runner: {exc}", file=sys.stderr)
        return 2
    if token is None:
        logging.getLogger("sandstream.runner").warning(
            "running WITHOUT authentication (--insecure-no-token): anyone who can reach "
            "this port can run containers"
        )
    config = hypercorn_config(args.host, args.port)
    app = create_runner_app(
        settings,
        sessions=sessions,
        launcher=launcher,
        metrics_route=args.metrics_bind is None,
    )
    app.config["BODY_TIMEOUT"] = timeout
    drain = get_runner(app).shutdown

    async def main() -> None:
        with shutdown_signals() as shutdown:
            server = partial(serve, app, config, shutdown_trigger=shutdown, drain=drain)
            await serve_with_metrics(server, app, args.metrics_bind)

    return run_server("sandstream runner", config, main, metrics_bind=args.metrics_bind)
