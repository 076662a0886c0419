"""The runner's metrics: its counters read when scraped (:class:`RunnerCollector`), and
each closed turn's times observed (:class:`TurnTimes`).

The :class:`~.admission.Runner` counts turns admitted, turns closed by outcome and
containers started as they happen, once per turn; the collector turns them, and the
live counts, into Prometheus metrics. :class:`TurnTimes` listens for each turn's close
and observes its duration, its time to the first line and to the first text, and its
error code. Scraping reads attributes only: it never blocks.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from .admission import Runner
from .pool import WarmPool
from .turn import AccessRecord, TurnStream

__all__ = ["TURN_SECONDS_BUCKETS", "RunnerCollector", "TurnTimes"]

TURN_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds: a turn's first line comes in tens of milliseconds to seconds, its end in
seconds to the runtime cap."""


class TurnTimes:
    """``sandstream_turn_duration_seconds`` (by outcome),
    ``sandstream_turn_first_line_seconds``, ``sandstream_turn_first_text_seconds`` and
    ``sandstream_turn_errors_total`` (by code), on ``registry``, observed as each turn
    of ``runner`` closes."""

    def __init__(self, runner: Runner, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            "sandstream_turn_duration_seconds",
            "Seconds from a turn's admission to its close, by outcome",
            ("outcome",),
            buckets=TURN_SECONDS_BUCKETS,
            registry=registry,
        )
        self.first_line = Histogram(
            "sandstream_turn_first_line_seconds",
            "Seconds from a turn's admission to its first line handed to the client",
            buckets=TURN_SECONDS_BUCKETS,
            registry=registry,
        )
        self.first_text = Histogram(
            "sandstream_turn_first_text_seconds",
            "Seconds from a turn's admission to its first line carrying the agent's text",
            buckets=TURN_SECONDS_BUCKETS,
            registry=registry,
        )
        self.errors = Counter(
            "sandstream_turn_errors",
            "Turns that ended with an error line, by its code",
            ("code",),
            registry=registry,
        )
        runner.add_listener(self.observe)

    def observe(self, turn: TurnStream, record: AccessRecord) -> None:
        """One closed turn's times and error code."""
        self.duration.labels(record.outcome).observe(record.duration_ms / 1000)
        if record.first_line_ms is not None:
            self.first_line.observe(record.first_line_ms / 1000)
        if record.first_text_ms is not None:
            self.first_text.observe(record.first_text_ms / 1000)
        if record.terminal is not None and record.terminal != "result":
            self.errors.labels(record.terminal).inc()


class RunnerCollector:
    """``sandstream_turns_*``, ``sandstream_containers_*``, ``sandstream_model_*`` and,
    with a warm pool, ``sandstream_warm_*`` of one :class:`Runner` (docs/operations.md
    lists them)."""

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
        yield from self._metering()
        if runner.pool is not None:
            yield from _pool(runner.pool)

    def _metering(self) -> Iterator[Metric]:
        """``sandstream_model_tokens`` and ``sandstream_model_calls`` (the gateway's)."""
        metering = self.runner.metering
        tokens = CounterMetricFamily(
            "sandstream_model_tokens",
            "Tokens of the model calls through the gateway, by provider, model and kind",
            labels=("provider", "model", "kind"),
        )
        for (provider, model, kind), count in sorted(metering.tokens.items()):
            tokens.add_metric((provider, model, kind), count)
        yield tokens
        calls = CounterMetricFamily(
            "sandstream_model_calls",
            "Model calls through the gateway, by provider and how they ended",
            labels=("provider", "outcome"),
        )
        for (provider, outcome), count in sorted(metering.calls.items()):
            calls.add_metric((provider, outcome), count)
        yield calls


def _pool(pool: WarmPool) -> Iterator[Metric]:
    """``sandstream_warm_sandboxes`` (by state) and ``sandstream_warm_*`` counters."""
    states = GaugeMetricFamily(
        "sandstream_warm_sandboxes",
        "Sandboxes of the warm pool, by state (warm: ready; starting; claimed: serving a turn)",
        labels=("state",),
    )
    for state, count in (("warm", pool.warm), ("starting", pool.filling), ("claimed", pool.in_use)):
        states.add_metric((state,), count)
    yield states
    counters = (
        ("started", "Warm sandboxes started", pool.started),
        ("claims", "Turns that started on a warm sandbox", pool.claimed),
        ("misses", "Turns that found the warm pool empty and started cold", pool.misses),
        ("recycled", "Warm sandboxes ended unclaimed after their TTL", pool.recycled),
        ("failures", "Warm starts that failed", pool.failed),
    )
    for name, text, value in counters:
        yield CounterMetricFamily(f"sandstream_warm_{name}", text, value=value)
