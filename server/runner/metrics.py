"""The runner's metrics, read from its counters when scraped (:class:`RunnerCollector`).

The :class:`~.admission.Runner` counts turns admitted, turns closed by outcome and
containers started as they happen, once per turn; this collector turns them, and the
live counts, into Prometheus metrics. Scraping reads attributes only: it never blocks.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from .admission import Runner
from .pool import WarmPool

__all__ = ["RunnerCollector"]


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
