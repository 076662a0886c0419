"""The sessions' metrics, read from their counters (:mod:`.counts`) when scraped.

Scraping reads attributes only (and counts the sessions not ended): it never blocks.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from .counts import TRANSPORTS
from .supervisor import SessionService

__all__ = ["SessionsCollector"]


class SessionsCollector:
    """``sandstream_sessions_*`` and ``sandstream_session_*`` of one
    :class:`SessionService` (docs/operations.md lists them)."""

    def __init__(self, service: SessionService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        service = self.service
        counts = service.counts
        yield GaugeMetricFamily(
            "sandstream_sessions_live",
            "Sessions running (not ended)",
            value=sum(1 for session in service.sessions() if not session.ended),
        )
        readers = GaugeMetricFamily(
            "sandstream_session_readers_live",
            "Readers of sessions connected now, by transport",
            labels=("transport",),
        )
        for transport in TRANSPORTS:
            readers.add_metric((transport,), counts.readers[transport])
        yield readers
        yield CounterMetricFamily(
            "sandstream_session_chunks_appended",
            "Chunks stored in sessions (each chunk one line)",
            value=counts.chunks,
        )
        yield CounterMetricFamily(
            "sandstream_session_bytes_appended",
            "Bytes of chunks stored in sessions",
            value=counts.bytes,
        )
