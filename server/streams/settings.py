"""The Durable Streams role's settings: one frozen dataclass, validated on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from .committer import SyncPolicy
from .segments import DEFAULT_SEGMENT_BYTES

__all__ = ["StreamSettings"]


@dataclass(frozen=True, kw_only=True)
class StreamSettings:
    """Where the streams live and how they are served. Times are in seconds.

    ``directory``: the index and the logs. ``sync``: when appends become durable.
    ``long_poll_timeout``: how long a ``live=long-poll`` read waits for data.
    ``sse_reconnect``: an SSE response ends after this long (clients reconnect from
    its last offset, which lets caches collapse readers). ``read_bytes``: the most
    bytes one read answers with. ``tail_bytes``: a stream's newest bytes kept in
    memory for live readers. ``segment_bytes``: the size of a log segment file.
    ``max_append_bytes``: the largest body a create or append may send (413 above).
    """

    directory: Path
    sync: SyncPolicy = field(default_factory=SyncPolicy)
    long_poll_timeout: float = 20.0
    sse_reconnect: float = 60.0
    read_bytes: int = 1024 * 1024
    tail_bytes: int = 256 * 1024
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    max_append_bytes: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("long_poll_timeout", "sse_reconnect"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        for name in ("read_bytes", "tail_bytes", "segment_bytes", "max_append_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
