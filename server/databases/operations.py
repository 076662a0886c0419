"""How long a backing store's operations take and how many fail, kept as plain counts.

An :class:`OperationTimes` belongs to one store (a database, the Redis lease store):
:meth:`OperationTimes.timed` wraps each of its calls by kind (``read``, ``write``,
``claim``, …), counting it into latency buckets and, if it raised, its failures. Nothing
is registered anywhere: a collector reads the counts when the registry is scraped
(:func:`operation_families`), one family for every store of a process. Counting never
blocks or raises; a cancelled call is timed, not counted as failed.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Final

import trio
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

__all__ = ["OPERATION_BUCKETS", "OperationTimes", "OperationsCollector", "operation_families"]

OPERATION_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Seconds: a local call takes a millisecond, a call waiting out an outage seconds."""


class _Kind:
    __slots__ = ("buckets", "failed", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(OPERATION_BUCKETS) + 1)
        self.total = 0.0
        self.failed = 0


class OperationTimes:
    """The calls of one store named ``store`` (``sqlite``, ``postgresql``, ``redis``),
    by kind: their latency and their failures."""

    def __init__(self, store: str) -> None:
        self.store = store
        self._kinds: dict[str, _Kind] = {}

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        """Count the block as one call of ``kind``: its time, and whether it raised."""
        counts = self._kinds.get(kind)
        if counts is None:
            counts = self._kinds[kind] = _Kind()
        started = time.perf_counter()
        try:
            yield
        except trio.Cancelled:
            raise
        except BaseException:
            counts.failed += 1
            raise
        finally:
            seconds = time.perf_counter() - started
            counts.buckets[bisect.bisect_left(OPERATION_BUCKETS, seconds)] += 1
            counts.total += seconds

    def kinds(self) -> Iterator[tuple[str, list[int], float, int]]:
        """Each kind seen: its name, its bucket counts (not cumulative; the last past
        every bound), its total seconds and its failures."""
        for kind, counts in self._kinds.items():
            yield kind, counts.buckets, counts.total, counts.failed


def operation_families(stores: Iterable[OperationTimes]) -> Iterator[Metric]:
    """``sandstream_store_operation_seconds`` (histogram) and
    ``sandstream_store_operation_errors_total``, by ``store`` and ``op``, of ``stores``."""
    seconds = HistogramMetricFamily(
        "sandstream_store_operation_seconds",
        "Seconds a database or Redis call took, failed or not, by store and operation",
        labels=("store", "op"),
    )
    errors = CounterMetricFamily(
        "sandstream_store_operation_errors",
        "Database or Redis calls that failed, by store and operation",
        labels=("store", "op"),
    )
    for times in stores:
        for kind, buckets, total, failed in times.kinds():
            cumulative = []
            running = 0
            for bound, count in zip((*OPERATION_BUCKETS, float("inf")), buckets, strict=True):
                running += count
                cumulative.append((_bound(bound), running))
            seconds.add_metric((times.store, kind), cumulative, total)
            errors.add_metric((times.store, kind), failed)
    yield seconds
    yield errors


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


PoolWaits = Callable[[], tuple[int, float]]
"""A pool's calls waiting for a connection now, and the seconds they waited in all."""


class OperationsCollector:
    """The stores ``stores()`` returns, read when scraped (:func:`operation_families`),
    and the connection pools ``pools()`` returns, by store name:
    ``sandstream_store_pool_waiting`` and ``sandstream_store_pool_wait_seconds_total``."""

    def __init__(
        self,
        stores: Callable[[], Iterable[OperationTimes]],
        pools: Callable[[], Iterable[tuple[str, PoolWaits]]] = tuple,
    ) -> None:
        self.stores = stores
        self.pools = pools

    def collect(self) -> Iterator[Metric]:
        yield from operation_families(self.stores())
        waiting = GaugeMetricFamily(
            "sandstream_store_pool_waiting",
            "Database calls waiting for a pooled connection now",
            labels=("store",),
        )
        waited = CounterMetricFamily(
            "sandstream_store_pool_wait_seconds",
            "Seconds database calls waited for a pooled connection, in all",
            labels=("store",),
        )
        for store, waits in self.pools():
            now, total = waits()
            waiting.add_metric((store,), now)
            waited.add_metric((store,), total)
        yield waiting
        yield waited
