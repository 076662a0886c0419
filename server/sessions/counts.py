"""What the sessions count as they go, for their metrics (:mod:`.metrics`).

One :class:`SessionCounts` per :class:`~.supervisor.SessionService`: chunks and bytes
stored, counted once per stored run (a batch of whole lines), never per chunk; readers
connected, by transport, counted when each starts and stops (:meth:`SessionCounts.reading`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, Literal, TypeAlias, get_args

__all__ = ["TRANSPORTS", "SessionCounts", "Transport"]

Transport: TypeAlias = Literal["sse", "ndjson", "websocket"]
TRANSPORTS: Final[tuple[Transport, ...]] = get_args(Transport)


class SessionCounts:
    """Counters of one session service (see the module docstring)."""

    __slots__ = ("bytes", "chunks", "readers")

    def __init__(self) -> None:
        self.chunks = 0
        """Chunks stored since start."""
        self.bytes = 0
        """Bytes of chunks stored since start."""
        self.readers: dict[Transport, int] = dict.fromkeys(TRANSPORTS, 0)
        """Readers connected now, by transport."""

    @contextmanager
    def reading(self, transport: Transport) -> Iterator[None]:
        """Count one reader of ``transport`` while the block runs."""
        self.readers[transport] += 1
        try:
            yield
        finally:
            self.readers[transport] -= 1
