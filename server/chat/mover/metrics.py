"""The log mover's metrics, read from its counters when scraped (:class:`MoverCollector`),
and the turns it settled (:class:`ChatTurnsCollector`).

The mover is made when the chat service runs: before that (and after) every metric
reads 0. Scraping reads attributes only: it never blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from .mover import CLAIM_RESULTS, LogMover
from .settle import SettledTurns

__all__ = ["ChatTurnsCollector", "MoverCollector"]


class ChatTurnsCollector:
    """``sandstream_chat_turns_settled_total`` and ``sandstream_chat_turn_duration_seconds``
    of ``turns`` (docs/operations.md lists them)."""

    def __init__(self, turns: SettledTurns) -> None:
        self.turns = turns

    def collect(self) -> Iterator[Metric]:
        yield from self.turns.settled.collect()
        yield from self.turns.duration.collect()


class MoverCollector:
    """``sandstream_mover_*`` of the :class:`LogMover` that ``mover()`` returns
    (``None``: none runs now; docs/operations.md lists them)."""

    def __init__(self, mover: Callable[[], LogMover[Any] | None]) -> None:
        self.mover = mover

    def collect(self) -> Iterator[Metric]:
        mover = self.mover()
        yield GaugeMetricFamily(
            "sandstream_mover_lag_chunks",
            "Chunks published by the sessions this replica moves and not moved yet, summed",
            value=0 if mover is None else mover.lag(),
        )
        claims = CounterMetricFamily(
            "sandstream_mover_lease_claims",
            "Claims of a session's lease, by result (acquired, held_elsewhere, failed)",
            labels=("result",),
        )
        for result in CLAIM_RESULTS:
            claims.add_metric((result,), 0 if mover is None else mover.claims[result])
        yield claims
        yield CounterMetricFamily(
            "sandstream_mover_lease_renew_failures",
            "Renewals of a held lease refused, failed or not answered in time",
            value=0 if mover is None else mover.renew_failures,
        )
        yield CounterMetricFamily(
            "sandstream_mover_takeovers",
            "Claims that resumed a session an earlier lease had begun moving",
            value=0 if mover is None else mover.takeovers,
        )
