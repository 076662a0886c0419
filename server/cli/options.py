"""The flags ``sandstream runner`` and ``sandstream serve`` share, and what they build.

How containers are sandboxed, launched and stopped (:func:`add_container_arguments`,
:func:`launcher_from_args`), how long the session buffer keeps chunks
(:func:`add_session_arguments`, :func:`session_settings`) and ``--body-timeout``. A
value argparse cannot read is a usage error (status 2, argparse's message); a
combination the launcher refuses is a :class:`ValueError` the command reports the same
way.
"""

from __future__ import annotations

import argparse
import logging
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from sandstream.core.agents_dir import AGENTS_DIR_ENV, default_agents_dir
from sandstream.server.runner.bwrap import BwrapLauncher, bwrap_available
from sandstream.server.runner.launcher import (
    DEFAULT_CONTAINER_ARGV,
    DEFAULT_KILL_GRACE,
    ContainerLauncher,
    LocalSubprocessLauncher,
)
from sandstream.server.runner.limits import ResourceLimits, parse_size
from sandstream.server.runner.network import (
    NETWORK_MODES,
    Endpoint,
    NetworkMode,
    network_mode,
    parse_endpoint,
)
from sandstream.server.sessions import SessionSettings
from sandstream.server.streams import StreamSettings, SyncPolicy

from .logs import LOG_FORMAT_ENV, LogFormat, parse_log_format

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "LOCAL_NETWORK_REFUSED",
    "NETWORK_OFF_REFUSED",
    "add_body_timeout_argument",
    "add_container_arguments",
    "add_observability_arguments",
    "add_session_arguments",
    "body_timeout",
    "host_port",
    "launcher_from_args",
    "port",
    "session_settings",
]

DEFAULT_BODY_TIMEOUT: Final = 60.0
"""Seconds a request body may take to arrive (Quart's ``BODY_TIMEOUT``)."""
NETWORK_OFF_REFUSED: Final = (
    "--sandbox-network none: a sandbox without the network cannot reach the callbacks "
    "(/api/sandbox/...) every turn starts with, so every turn would fail bootstrap_failed; "
    "use isolated (none suits only a --container-cmd that needs no callbacks)"
)
LOCAL_NETWORK_REFUSED: Final = (
    "--sandbox local cannot isolate the network (its containers share the server's); "
    "use --sandbox bwrap, or --sandbox-network host"
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
        type=_network,
        default=None,
        metavar="{" + ",".join(NETWORK_MODES) + "}",
        help="bwrap: isolated, a network of its own (pasta) that reaches the outside world "
        "but of this host only the turn's callback and --sandbox-allow; host, shares the "
        "host's network and its loopback services (development); none, loopback only — "
        "refused with the default --container-cmd, whose callbacks need the network "
        "(on and off: host and none; default: isolated)",
    )
    group.add_argument(
        "--sandbox-allow",
        type=_endpoint,
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="isolated: a service on this host a sandbox may reach as well (its port on "
        "the host's loopback), e.g. a model provider at 127.0.0.1:11434; repeatable",
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
        help="bwrap: what a sandbox's /tmp (work dir) and /dev/shm may hold together, "
        "or none (default: 1G)",
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
        "--agents-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the ACP agents installed by `sandstream agents install`, read-only in every "
        f"sandbox (default: ${AGENTS_DIR_ENV}, else $XDG_CACHE_HOME/sandstream/agents)",
    )
    group.add_argument(
        "--kill-grace",
        type=float,
        default=DEFAULT_KILL_GRACE,
        help="local: seconds between SIGTERM and SIGKILL when a container is stopped",
    )


def port(text: str) -> int:
    """``--port``: 0 (any free port) to 65535, else argparse's usage error naming it."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9100`` for IPv6), else argparse's usage error naming it."""
    host, colon, number = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r} (e.g. 127.0.0.1:9100)")
    return host, port(number)


def _log_format(text: str) -> LogFormat:
    try:
        return parse_log_format(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; from --log-format or ${LOG_FORMAT_ENV}") from None


def add_observability_arguments(
    group: argparse._ActionsContainer, environ: Mapping[str, str]
) -> None:
    """``--log-format`` (default ``$SANDSTREAM_LOG_FORMAT``, else ``auto``) and
    ``--metrics-bind``."""
    group.add_argument(
        "--log-format",
        type=_log_format,
        default=environ.get(LOG_FORMAT_ENV) or "auto",
        metavar="{auto,json,text}",
        help="log records as JSON lines or text; auto: text on a terminal, else JSON "
        f"(${LOG_FORMAT_ENV}, auto)",
    )
    group.add_argument(
        "--metrics-bind",
        type=host_port,
        default=None,
        metavar="HOST:PORT",
        help="serve GET /metrics on this address alone, without a token "
        "(default: on the main port, behind the server's tokens)",
    )


def _size(text: str) -> int | None:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _network(text: str) -> NetworkMode:
    try:
        return network_mode(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _endpoint(text: str) -> Endpoint:
    try:
        return parse_endpoint(text)
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

    ``hidden_paths`` (the data dir) are never visible inside a bwrap sandbox; the agents
    dir is, read-only (when it exists), and containers find it in
    ``$SANDSTREAM_AGENTS_DIR``. Without
    ``--sandbox``, bwrap is used when it is installed (Linux), else ``local``. The
    ``local`` launcher is announced with a warning: it isolates nothing.
    ``--sandbox-network none`` with the default container is refused
    (:data:`NETWORK_OFF_REFUSED`): that container fetches every turn's environment from
    the server's callbacks over the network, which a sandbox of its own loopback cannot
    reach, so every turn would end ``bootstrap_failed``. ``--sandbox local`` with
    ``--sandbox-network isolated`` or ``none`` given is refused
    (:data:`LOCAL_NETWORK_REFUSED`); without the flag, it shares the server's network.
    """
    argv = shlex.split(args.container_cmd)
    agents = args.agents_dir or default_agents_dir()
    agents_env = {AGENTS_DIR_ENV: str(agents)}
    sandbox = args.sandbox or ("bwrap" if bwrap_available() else "local")
    network: NetworkMode = args.sandbox_network or "isolated"
    if sandbox == "bwrap":
        if network == "none" and tuple(argv) == DEFAULT_CONTAINER_ARGV:
            raise ValueError(NETWORK_OFF_REFUSED)
        limits = ResourceLimits(
            memory_bytes=args.memory_limit,
            processes=args.process_limit,
            cpu_seconds=args.cpu_limit,
            disk_bytes=args.disk_limit,
        )
        if not agents.is_dir():
            logging.getLogger("sandstream.runner").info(
                "no ACP agents in %s (sandstream agents install): acp presets will fail", agents
            )
        launcher = BwrapLauncher(
            argv=argv,
            env=agents_env,
            network=network,
            allowed=args.sandbox_allow,
            limits=limits,
            hidden_paths=hidden_paths,
            extra_paths=[str(agents)] if agents.is_dir() else [],
            stderr=args.container_stderr,
        )
        logging.getLogger("sandstream.runner").debug(
            "sandbox: bwrap (network %s; limits: %s; enforced by %s)",
            network,
            limits,
            f"cgroup v{launcher.cgroups.version}" if launcher.cgroups else "/proc polling",
        )
        return launcher
    if args.sandbox_network in ("isolated", "none") or args.sandbox_allow:
        raise ValueError(LOCAL_NETWORK_REFUSED)
    logging.getLogger("sandstream.runner").warning(
        "sandbox: local — containers run as plain subprocesses with this server's user, "
        "files and network; they are NOT isolated and can outlive their turn "
        "(development only; install bubblewrap and use --sandbox bwrap)"
    )
    return LocalSubprocessLauncher(
        argv=argv,
        env=agents_env,
        kill_grace=args.kill_grace,
        stderr=args.container_stderr,
    )


def add_session_arguments(group: argparse._ActionsContainer) -> None:
    """The flags that say how long the session buffer keeps chunks, and how its
    stream store syncs."""
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
    group.add_argument(
        "--streams-sync",
        default="commit",
        metavar="POLICY",
        help="when appends to the Durable Streams (the sessions' included) are made "
        "durable: 'commit' (default: fsync before the append is answered, shared by "
        "concurrent appends) or SECONDS (answered once written, fsync every SECONDS)",
    )


def session_settings(data_dir: Path, args: argparse.Namespace) -> SessionSettings:
    """The :class:`SessionSettings` of :func:`add_session_arguments`' flags."""
    return SessionSettings(
        data_dir=data_dir,
        retain_chunks=args.session_retain_chunks,
        ttl=args.session_ttl or None,
        streams=StreamSettings(
            directory=data_dir / "streams", sync=SyncPolicy.parse(args.streams_sync)
        ),
    )


def add_body_timeout_argument(group: argparse._ActionsContainer) -> None:
    """``--body-timeout``: the seconds a request body may take to arrive (408 after)."""
    group.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULT_BODY_TIMEOUT,
        help="seconds a request body may take to arrive in full (408 after; default 60)",
    )


def body_timeout(args: argparse.Namespace) -> float:
    """``--body-timeout``, checked: :class:`ValueError` unless it is > 0."""
    if not args.body_timeout > 0:
        raise ValueError("--body-timeout must be > 0")
    return float(args.body_timeout)
