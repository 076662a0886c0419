"""The runner's settings: one frozen dataclass, validated on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from sandstream.core import DEFAULT_MAX_LINE_BYTES

__all__ = ["DEFAULT_RUNTIME_CAP", "RunnerSettings"]

DEFAULT_RUNTIME_CAP: Final = 8 * 3600.0
"""Seconds a turn may run before ``error{code:"runtime_exceeded"}`` ."""


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
    in one write. ``shutdown_timeout``: on shutdown, how long live turns get to
    deliver their final line before their connections are cut. ``strict``: the core's
    strict mode, where the first invalid line ends the turn with
    ``error{code:"protocol_error"}`` (and stops the container) instead of being dropped.
    """

    token: str | None
    max_live: int = 64
    retry_after: int = 5
    runtime_cap: float = DEFAULT_RUNTIME_CAP
    stall_timeout: float | None = 60.0
    settle_timeout: float = 5.0
    drain_timeout: float = 1.0
    shutdown_timeout: float = 10.0
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    read_size: int = 256 * 1024
    max_body_bytes: int = 4 * 1024 * 1024
    strict: bool = False

    def __post_init__(self) -> None:
        if self.token is not None and not self.token.strip():
            raise ValueError("token must not be empty (use None to disable the check)")
        if self.max_live < 1:
            raise ValueError(f"max_live must be >= 1, got {self.max_live}")
        if self.retry_after < 0:
            raise ValueError(f"retry_after must be >= 0, got {self.retry_after}")
        for name in ("runtime_cap", "settle_timeout", "drain_timeout", "shutdown_timeout"):
            _check_positive(name, getattr(self, name))
        if self.stall_timeout is not None:
            _check_positive("stall_timeout", self.stall_timeout)
        for name in ("max_line_bytes", "read_size", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def _check_positive(name: str, value: float) -> None:
    if not (value > 0 and not math.isnan(value)):
        raise ValueError(f"{name} must be > 0, got {value}")
    if math.isinf(value) and name != "runtime_cap":
        raise ValueError(f"{name} must be finite, got {value}")
