"""The runner's metrics, read from its counters when scraped (:class:`RunnerCollector`).

The :class:`~.admission.Runner` counts turns admitted, turns closed by outcome and
containers started as they happen, once per turn; this collector turns them, and the
live counts, into Prometheus metrics. Scraping reads attributes only: it never blocks.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from .admission import Runner

__all__ = ["RunnerCollector"]


class RunnerCollector:
    """``sandstream_turns_*`` and ``sandstream_containers_*`` of one :class:`Runner`
    (docs/operations.md lists them)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def collect(self) -> Iterator[Metric]:
        runner = self.runner
        yield GaugeMetricFamily(
            "sandstream_turns_live", "Turns admitted and not yet closed", value=runner.open_turns
        )
        yield CounterMetricFamily(
            "sandstream_turns_started", "Turns admitted", value=runner.admitted
        )
        ended = CounterMetricFamily(
            "sandstream_turns_ended", "Turns closed, by how they ended", labels=("outcome",)
        )
        for outcome, count in runner.ended.items():
            ended.add_metric((outcome,), count)
        yield ended
        yield GaugeMetricFamily(
            "sandstream_containers_live",
            "Containers running or starting (admitted turns whose container is not gone)",
            value=runner.live,
        )
        yield CounterMetricFamily(
            "sandstream_containers_started",
            "Containers that started (launched, not failed to)",
            value=runner.containers_started,
        )
