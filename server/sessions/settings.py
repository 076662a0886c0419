"""The session role's settings: one frozen dataclass, validated on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sandstream.server.streams import StreamSettings

__all__ = ["SessionSettings"]


@dataclass(frozen=True, kw_only=True)
class SessionSettings:
    """Where the buffer lives and how long it keeps things. Times are in seconds.

    ``data_dir``: the buffer's directory (``sessions.sqlite3`` in it). Retention:
    ``retain_chunks`` keeps at most that many newest chunks per session (``None``:
    all); ``ttl`` deletes a session that ended that long ago (``None``: never),
    checked every ``sweep_interval``. ``tail_bytes``: newest chunks of a live session
    kept in memory for its readers. ``read_bytes``: the most a reader is handed per
    read. ``keepalive``: an idle reader gets a keep-alive after this long.
    ``readers``: SQLite reader threads. ``streams``: the stream store that keeps the
    sessions' output (default: in ``streams/`` of ``data_dir``, default settings).
    """

    data_dir: Path
    retain_chunks: int | None = None
    ttl: float | None = 7 * 24 * 3600.0
    sweep_interval: float = 60.0
    tail_bytes: int = 1024 * 1024
    read_bytes: int = 256 * 1024
    keepalive: float = 15.0
    readers: int = 4
    streams: StreamSettings | None = None

    @property
    def stream_settings(self) -> StreamSettings:
        """``streams``, or the default store in the data dir."""
        return self.streams or StreamSettings(directory=self.data_dir / "streams")

    def __post_init__(self) -> None:
        if self.retain_chunks is not None and self.retain_chunks < 1:
            raise ValueError(f"retain_chunks must be >= 1, got {self.retain_chunks}")
        for name in ("sweep_interval", "keepalive"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if self.ttl is not None and not self.ttl > 0:
            raise ValueError(f"ttl must be > 0, got {self.ttl}")
        for name in ("tail_bytes", "read_bytes", "readers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
