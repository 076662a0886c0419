"""Timing a store's calls: every call counted once in exactly one bucket, by kind; a
call that raised counted as failed, a cancelled one not; the exposition's buckets
cumulative and ending at the count (hypothesis over any mix of calls)."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from sandstream.server.databases import OperationTimes, operation_families

CALLS = st.lists(st.tuples(st.sampled_from(["read", "write"]), st.booleans()), max_size=40)


@given(CALLS)
def test_each_call_is_counted_once_by_kind_and_outcome(calls: list[tuple[str, bool]]) -> None:
    times = OperationTimes("sqlite")
    for kind, fails in calls:
        try:
            with times.timed(kind):
                if fails:
                    raise OSError("refused")
        except OSError:
            pass
    families = {family.name: family for family in operation_families([times])}
    counts = {
        s.labels["op"]: s.value
        for s in families["sandstream_store_operation_seconds"].samples
        if s.name.endswith("_count")
    }
    errors = {
        s.labels["op"]: s.value for s in families["sandstream_store_operation_errors"].samples
    }
    for kind in ("read", "write"):
        made = [fails for k, fails in calls if k == kind]
        assert counts.get(kind, 0) == len(made)
        assert errors.get(kind, 0) == sum(made)
    for kind in counts:
        buckets = [
            s.value
            for s in families["sandstream_store_operation_seconds"].samples
            if s.name.endswith("_bucket") and s.labels["op"] == kind
        ]
        assert buckets == sorted(buckets) and buckets[-1] == counts[kind]


async def test_a_cancelled_call_is_timed_but_not_failed() -> None:
    times = OperationTimes("postgresql")
    with trio.move_on_after(0):
        with times.timed("write"):
            await trio.sleep(1)
    [(kind, _, _, failed)] = list(times.kinds())
    assert (kind, failed) == ("write", 0)
    with pytest.raises(ValueError), times.timed("write"):
        raise ValueError("no")
    [(_, buckets, _, failed)] = list(times.kinds())
    assert (sum(buckets), failed) == (2, 1)
