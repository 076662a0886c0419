"""The flags ``sandstream runner`` and ``sandstream serve`` share, and what they build.

The settings that are no role's dataclass field, each declared once
(:class:`~sandstream.server.settings_table.Setting`): how containers are sandboxed,
launched and stopped (:data:`CONTAINER_SETTINGS`, :func:`launcher_from_args`), the
address, the log and ``--body-timeout``; and how long the session buffer keeps chunks
(:data:`SESSION_SETTINGS`, the sessions' own, :func:`session_settings`). A value
argparse cannot read is a usage error (status 2, argparse's message); a combination the
launcher refuses is a :class:`ValueError` the command reports the same way.
"""

from __future__ import annotations

import argparse
import logging
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from sandstream.core import AGENTS_DIR_ENV, default_agents_dir
from sandstream.server.runner import (
    DEFAULT_CONTAINER_ARGV,
    DEFAULT_KILL_GRACE,
    NETWORK_MODES,
    AddressRange,
    BwrapLauncher,
    ContainerLauncher,
    Endpoint,
    LocalSubprocessLauncher,
    NetworkMode,
    ResourceLimits,
    bwrap_available,
    network_mode,
    parse_endpoint,
    parse_range,
    parse_size,
)
from sandstream.server.sessions import SessionSettings
from sandstream.server.settings_table import Setting, from_args, settings_of
from sandstream.server.streams import StreamSettings

from .logs import LOG_FORMAT_ENV, LogFormat, parse_log_format

__all__ = [
    "ALLOW_RANGE_REFUSED",
    "BODY_TIMEOUT",
    "CONTAINER_SETTINGS",
    "DEFAULT_BODY_TIMEOUT",
    "HOST",
    "LOCAL_NETWORK_REFUSED",
    "LOG_LEVEL",
    "NETWORK_OFF_REFUSED",
    "OBSERVABILITY",
    "SESSION_SETTINGS",
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
ALLOW_RANGE_REFUSED: Final = (
    "--sandbox-allow-range opens a range to --sandbox-network isolated, which refuses "
    "the non-public ranges; sealed reaches no range at all, host and none refuse none"
)
LOCAL_NETWORK_REFUSED: Final = (
    "--sandbox local cannot isolate the network (its containers share the server's); "
    "use --sandbox bwrap, or --sandbox-network host"
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


def _range(text: str) -> AddressRange:
    try:
        return parse_range(text)
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


HOST: Final = Setting(flag="--host", default="127.0.0.1", help="address to bind")
LOG_LEVEL: Final = Setting(flag="--log-level", default="info", help="log level")
BODY_TIMEOUT: Final = Setting(
    flag="--body-timeout",
    default=DEFAULT_BODY_TIMEOUT,
    parse=float,
    help="seconds a request body may take to arrive in full, 408 after",
)
OBSERVABILITY: Final = (
    Setting(
        flag="--log-format",
        default="auto",
        env=LOG_FORMAT_ENV,
        parse=_log_format,
        metavar="{auto,json,text}",
        help="log records as JSON lines or text; auto: text on a terminal, else JSON",
    ),
    Setting(
        flag="--metrics-bind",
        parse=host_port,
        metavar="HOST:PORT",
        shown="on the main port, behind the server's tokens",
        help="serve GET /metrics on this address alone, without a token",
    ),
)
"""``--log-format`` and ``--metrics-bind``."""
_LIMITS: Final = ResourceLimits()
CONTAINER_SETTINGS: Final = (
    Setting(
        flag="--sandbox",
        choices=("bwrap", "local"),
        help="bwrap: each container in a bubblewrap sandbox (the default on Linux when "
        "bwrap is installed); local: a bare subprocess that isolates nothing (development)",
    ),
    Setting(
        flag="--sandbox-network",
        parse=_network,
        metavar="{" + ",".join(NETWORK_MODES) + "}",
        shown="isolated; on and off: host and none",
        help="bwrap: isolated, a network of its own (pasta) that reaches the outside world "
        "but of this host only the turn's callback, its model gateway and --sandbox-allow, "
        "and no private, link-local or other non-public address but its resolvers and "
        "--sandbox-allow-range; sealed, a network "
        "of its own that reaches only those ports of this host's loopback, no outside "
        "world, no DNS (any other address fails at once); host, shares the host's "
        "network and its loopback services (development; a warning at start); none, "
        "loopback only — "
        "refused with the default --container-cmd, whose callbacks need the network",
    ),
    Setting(
        flag="--sandbox-allow",
        kind="repeated",
        parse=_endpoint,
        metavar="HOST:PORT",
        help="isolated, sealed: a service on this host a sandbox may reach as well (its "
        "port on the host's loopback), e.g. a model provider at 127.0.0.1:11434; sealed "
        "takes only loopback addresses (127.0.0.1, [::1], localhost)",
    ),
    Setting(
        flag="--sandbox-allow-range",
        kind="repeated",
        parse=_range,
        metavar="CIDR",
        help="isolated: a private, link-local or other non-public address range a sandbox "
        "may reach after all (it is refused every such range but its resolvers' port 53 "
        "and its callback's and model gateway's addresses), e.g. 10.20.0.0/16 for a "
        "package mirror on the local network",
    ),
    Setting(
        flag="--memory-limit",
        default=_LIMITS.memory_bytes,
        parse=_size,
        metavar="SIZE",
        shown="2G",
        help="bwrap: memory of one sandbox, e.g. 512M, 2G, none",
    ),
    Setting(
        flag="--process-limit",
        default=_LIMITS.processes,
        parse=_optional_int,
        metavar="N",
        help="bwrap: processes alive at once in one sandbox, or none",
    ),
    Setting(
        flag="--cpu-limit",
        default=_LIMITS.cpu_seconds,
        parse=_optional_float,
        metavar="SECONDS",
        shown="none",
        help="bwrap: CPU time of one sandbox, or none",
    ),
    Setting(
        flag="--disk-limit",
        default=_LIMITS.disk_bytes,
        parse=_size,
        metavar="SIZE",
        shown="1G",
        help="bwrap: what a sandbox's /tmp (work dir) and /dev/shm may hold together, or none",
    ),
    Setting(
        flag="--container-cmd",
        default=shlex.join(DEFAULT_CONTAINER_ARGV),
        help="command that runs one container; dispatch JSON on its stdin",
    ),
    Setting(
        flag="--container-stderr",
        default="log",
        choices=("log", "inherit", "discard"),
        help="what to do with a container's stderr",
    ),
    Setting(
        flag="--agents-dir",
        parse=Path,
        metavar="DIR",
        shown=f"${AGENTS_DIR_ENV}, else $XDG_CACHE_HOME/sandstream/agents",
        help="the ACP agents installed by `sandstream agents install`, read-only in every sandbox",
    ),
    Setting(
        flag="--kill-grace",
        default=DEFAULT_KILL_GRACE,
        parse=float,
        help="local: seconds between SIGTERM and SIGKILL when a container is stopped",
    ),
)
"""How containers are sandboxed, launched and stopped (:func:`launcher_from_args`)."""
_SESSION: Final = settings_of(SessionSettings)
_STREAMS: Final = settings_of(StreamSettings)
SESSION_SETTINGS: Final = (
    _SESSION["retain_chunks"],
    _SESSION["ttl"],
    _STREAMS["sync"],
    _STREAMS["max_streams"],
    _STREAMS["max_stream_bytes"],
)
"""How long the session buffer keeps chunks, how its stream store syncs, and the
Durable Streams' quotas (:func:`session_settings`)."""


def launcher_from_args(
    args: argparse.Namespace, *, hidden_paths: Sequence[str] = ()
) -> ContainerLauncher:
    """The launcher :data:`CONTAINER_SETTINGS`' flags describe (``ValueError`` if bad).

    ``hidden_paths`` (the data dir) are never visible inside a bwrap sandbox; the agents
    dir is, read-only (when it exists), and containers find it in
    ``$SANDSTREAM_AGENTS_DIR``. Without
    ``--sandbox``, bwrap is used when it is installed (Linux), else ``local``. The
    ``local`` launcher is announced with a warning: it isolates nothing; so is
    ``--sandbox-network host``, which isolates no network.
    ``--sandbox-network none`` with the default container is refused
    (:data:`NETWORK_OFF_REFUSED`): that container fetches every turn's environment from
    the server's callbacks over the network, which a sandbox of its own loopback cannot
    reach, so every turn would end ``bootstrap_failed``. ``--sandbox local`` with
    ``--sandbox-network isolated``, ``sealed`` or ``none`` given is refused
    (:data:`LOCAL_NETWORK_REFUSED`); without the flag, it shares the server's network.
    """
    argv = shlex.split(args.container_cmd)
    agents = args.agents_dir or default_agents_dir()
    agents_env = {AGENTS_DIR_ENV: str(agents)}
    sandbox = args.sandbox or ("bwrap" if bwrap_available() else "local")
    network: NetworkMode = args.sandbox_network or "isolated"
    if sandbox == "bwrap":
        if network != "isolated" and args.sandbox_allow_range:
            raise ValueError(ALLOW_RANGE_REFUSED)
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
            allowed_ranges=args.sandbox_allow_range,
            limits=limits,
            hidden_paths=hidden_paths,
            extra_paths=[str(agents)] if agents.is_dir() else [],
            stderr=args.container_stderr,
        )
        if network == "host":
            logging.getLogger("sandstream.runner").warning(
                "sandbox: bwrap with --sandbox-network host — every sandbox shares this "
                "host's network: it reaches every service on this host's loopback (the "
                "server's, its database's, its Redis) and the local network and cloud "
                "metadata addresses (development only; use --sandbox-network isolated)"
            )
        logging.getLogger("sandstream.runner").debug(
            "sandbox: bwrap (network %s; limits: %s; enforced by %s)",
            network,
            limits,
            f"cgroup v{launcher.cgroups.version}" if launcher.cgroups else "/proc polling",
        )
        return launcher
    if (
        args.sandbox_network in ("isolated", "sealed", "none")
        or args.sandbox_allow
        or args.sandbox_allow_range
    ):
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


def session_settings(data_dir: Path, args: argparse.Namespace) -> SessionSettings:
    """The :class:`SessionSettings` of :data:`SESSION_SETTINGS`' flags."""
    streams = from_args(StreamSettings, args, directory=data_dir / "streams")
    return from_args(SessionSettings, args, data_dir=data_dir, streams=streams)


def body_timeout(args: argparse.Namespace) -> float:
    """``--body-timeout``, checked: :class:`ValueError` unless it is > 0."""
    if not args.body_timeout > 0:
        raise ValueError("--body-timeout must be > 0")
    return float(args.body_timeout)
