"""``sandstream runner``: serve ``POST /stream`` (and, with ``--data-dir``, ``/sessions``).

The token comes from ``--token`` or ``$SANDSTREAM_RUNNER_TOKEN``; without one the
runner refuses to start unless ``--insecure-no-token`` is given. A bad flag or setting
is one line on stderr and exit status 2. SIGINT/SIGTERM end running turns with
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

from sandstream.core import provider_vars
from sandstream.server.app import create_runner_app
from sandstream.server.http import MissingTokenError, resolve_token, serve, shutdown_signals
from sandstream.server.runner import SHUTDOWN_TIMEOUT, STALL_TIMEOUT, RunnerSettings, get_runner
from sandstream.server.settings_table import Setting, add_settings, from_args, settings_of

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

__all__ = ["DEFAULT_RUNNER_PORT", "HELP", "build_runner_parser", "runner_main"]

HELP: Final = "serve POST /stream"
"""The command's line in ``sandstream --help``."""
DEFAULT_RUNNER_PORT: Final = 8765


PORT: Final = Setting(flag="--port", default=DEFAULT_RUNNER_PORT, parse=port, help="port")
TOKEN: Final = Setting(
    flag="--token", help="runner bearer token (default: $SANDSTREAM_RUNNER_TOKEN; visible in ps)"
)
INSECURE_NO_TOKEN: Final = Setting(
    flag="--insecure-no-token",
    kind="switch",
    help="accept POST /stream without a token (local development only)",
)
DATA_DIR: Final = Setting(
    flag="--data-dir",
    parse=Path,
    help="the session buffer's directory; without it /sessions is not served",
)
_RUNNER: Final = settings_of(RunnerSettings)


def build_runner_parser(
    prog: str = "sandstream runner", environ: Mapping[str, str] | None = None
) -> argparse.ArgumentParser:
    """The command line of ``sandstream runner``; defaults from ``environ`` (default
    ``os.environ``) where the help names a variable."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s [OPTION ...] (--help lists them)",
        description="Run sandbox containers and stream their NDJSON envelope (POST /stream).",
    )
    add_settings(parser, (HOST, PORT, LOG_LEVEL, *OBSERVABILITY), env)
    add_settings(parser.add_argument_group("authentication"), (TOKEN, INSECURE_NO_TOKEN), env)
    limits = (
        _RUNNER["max_live"],
        _RUNNER["retry_after"],
        _RUNNER["runtime_cap"],
        STALL_TIMEOUT,
        SHUTDOWN_TIMEOUT,
        BODY_TIMEOUT,
        _RUNNER["read_size"],
    )
    add_settings(parser.add_argument_group("limits"), limits, env)
    add_settings(parser.add_argument_group("container"), CONTAINER_SETTINGS, env)
    add_settings(
        parser.add_argument_group("warm pool"), (_RUNNER["warm_pool"], _RUNNER["warm_ttl"]), env
    )
    gateway = (_RUNNER["model_gateway"], _RUNNER["provider_unavailable_after"])
    add_settings(parser.add_argument_group("model gateway"), gateway, env)
    sessions = parser.add_argument_group("durable sessions")
    add_settings(sessions, (DATA_DIR, *SESSION_SETTINGS), env)
    return parser


def runner_main(argv: Sequence[str] | None = None) -> int:
    """``sandstream runner`` until SIGINT/SIGTERM; the exit status (2: bad configuration)."""
    args = build_runner_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        token = resolve_token(args.token, insecure_no_token=args.insecure_no_token)
        settings = from_args(
            RunnerSettings, args, token=token, provider_env=provider_vars(os.environ)
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
