"""The runner's settings: one frozen dataclass, validated on construction.

Each field that is a flag of ``sandstream runner`` (and ``sandstream serve``, which
shares :data:`STALL_TIMEOUT` and :data:`SHUTDOWN_TIMEOUT` with the chat backend's
settings) is declared here once (:mod:`sandstream.server.settings_table`). A bad value
raises :class:`ValueError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field
from typing import Final

from sandstream.core import DEFAULT_MAX_LINE_BYTES
from sandstream.server.settings_table import (
    Setting,
    at_least,
    check_fields,
    finite_positive,
    positive,
)

__all__ = ["DEFAULT_RUNTIME_CAP", "SHUTDOWN_TIMEOUT", "STALL_TIMEOUT", "RunnerSettings"]

DEFAULT_RUNTIME_CAP: Final = 8 * 3600.0
"""Seconds a turn may run before ``error{code:"runtime_exceeded"}`` ."""
STALL_TIMEOUT: Final = Setting(
    flag="--stall-timeout",
    default=60.0,
    parse=float,
    shown="60; 0: never",
    help="end a turn whose client has not read for this many seconds",
    check=finite_positive,
    convert=lambda seconds: seconds or None,
)
SHUTDOWN_TIMEOUT: Final = Setting(
    flag="--shutdown-timeout",
    default=10.0,
    parse=float,
    help="seconds running turns get to deliver their last line on shutdown",
    check=finite_positive,
)


def _token(name: str, value: str) -> str | None:
    return None if value.strip() else f"{name} must not be empty (use None to disable the check)"


@dataclass(frozen=True, kw_only=True)
class RunnerSettings:
    """How the runner admits, runs and ends turns. Times are in seconds.

    ``token``: the bearer token ``POST /stream`` requires; ``None`` disables the check
    (only ever with ``--insecure-no-token``). ``max_live``: containers alive at once;
    one more gets 503 with ``Retry-After: retry_after``. ``runtime_cap``: a turn's
    hard limit. ``stall_timeout``: a client that has not taken a written chunk for
    this long is given up (``None``: never). ``settle_timeout``: after the container
    closes its stdout, how long it may take to exit before it is stopped.
    ``drain_timeout``: after the container exits, how long its stdout may stay open
    (held by a leftover process) before the turn ends without it. ``read_size``:
    bytes asked of the container's stdout per read; what one read returns goes out
    in one write. ``shutdown_timeout``: on shutdown, how long running turns get to
    deliver their final line before their connections are cut. ``strict``: the core's
    strict mode, where the first invalid line ends the turn with
    ``error{code:"protocol_error"}`` (and stops the container) instead of being dropped.
    ``model_gateway``: serve each turn's model calls through a gateway holding the
    provider keys (:mod:`sandstream.server.gateway`), the sandbox getting a credential
    of the turn; ``provider_unavailable_after``: seconds of failing model calls, none
    succeeding, after which a turn ends with ``error{code:"provider_unavailable"}``;
    ``provider_env``: the runner's own provider variables
    (:data:`~sandstream.core.PROVIDER_VARS`), for a provider the dispatch gives no key.
    ``warm_pool``: sandboxes kept started ahead of turns (:mod:`.pool`; the commands
    default to 1, a settings object made in code to 0, none); ``warm_ttl``: how long an
    unclaimed one waits before it is recycled.
    """

    token: str | None = Setting(check=_token).field(default=MISSING)
    max_live: int = Setting(
        flag="--max-live",
        default=64,
        parse=int,
        help="containers at once, 503 beyond",
        check=at_least(1),
    ).field()
    retry_after: int = Setting(
        flag="--retry-after",
        default=5,
        parse=int,
        help="Retry-After seconds on 503",
        check=at_least(0),
    ).field()
    runtime_cap: float = Setting(
        flag="--runtime-cap",
        default=DEFAULT_RUNTIME_CAP,
        parse=float,
        shown="8 h",
        help="seconds per turn",
        check=positive,
    ).field()
    stall_timeout: float | None = STALL_TIMEOUT.field()
    settle_timeout: float = Setting(default=5.0, check=finite_positive).field()
    drain_timeout: float = Setting(default=1.0, check=finite_positive).field()
    shutdown_timeout: float = SHUTDOWN_TIMEOUT.field()
    max_line_bytes: int = Setting(default=DEFAULT_MAX_LINE_BYTES, check=at_least(1)).field()
    read_size: int = Setting(
        flag="--read-size",
        default=256 * 1024,
        parse=int,
        shown="256 KiB",
        help="bytes asked of a container's stdout per read; one read is one write",
        check=at_least(1),
    ).field()
    max_body_bytes: int = Setting(default=4 * 1024 * 1024, check=at_least(1)).field()
    strict: bool = False
    model_gateway: bool = Setting(
        flag="--no-model-gateway",
        kind="switch",
        env="SANDSTREAM_NO_MODEL_GATEWAY",
        help="no model gateway: a dispatch's provider keys go into its sandbox as they are",
        convert=lambda off: not off,
    ).field(default=True)
    provider_unavailable_after: float = Setting(
        flag="--provider-unavailable-after",
        default=60.0,
        parse=float,
        env="SANDSTREAM_PROVIDER_UNAVAILABLE_AFTER",
        help="end a turn with error provider_unavailable once its model calls have "
        "failed for this many seconds with none succeeding",
        check=finite_positive,
    ).field()
    provider_env: Mapping[str, str] = field(default_factory=dict)
    warm_pool: int = Setting(
        flag="--warm-pool",
        default=1,
        parse=int,
        env="SANDSTREAM_WARM_POOL",
        help="sandboxes kept started ahead of turns, their container loaded and waiting "
        "(the default container command only); 0: every turn starts its own",
        check=at_least(0),
    ).field(default=0)
    warm_ttl: float = Setting(
        flag="--warm-ttl",
        default=600.0,
        parse=float,
        env="SANDSTREAM_WARM_TTL",
        help="seconds a warm sandbox waits for a turn before it is replaced by a fresh one",
        check=finite_positive,
    ).field()

    def __post_init__(self) -> None:
        check_fields(self, ValueError)
