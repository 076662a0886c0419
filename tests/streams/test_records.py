"""The log's record format: round trips, and a scan of any prefix yields exactly the
whole records in it (what recovery keeps after a torn write)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sandstream.server.streams.records import HEADER, ProducerStamp, encode, payloads, scan

stamps = st.one_of(
    st.none(),
    st.builds(
        ProducerStamp,
        st.text(min_size=1, max_size=20),
        st.integers(0, 2**53 - 1),
        st.integers(0, 2**53 - 1),
    ),
)
appends = st.lists(
    st.tuples(
        st.binary(max_size=64),
        stamps,
        st.one_of(st.none(), st.text(max_size=10)),
        st.booleans(),
        st.one_of(st.none(), st.integers(0, 2**64 - 1)),
    ),
    max_size=12,
)


Appends = list[tuple[bytes, ProducerStamp | None, str | None, bool, int | None]]


def _log(items: Appends) -> bytes:
    return b"".join(
        encode(payload, producer=producer, stream_seq=seq, close=close, tag=tag)
        for payload, producer, seq, close, tag in items
    )


@given(appends, st.integers(0, 10**6))
def test_records_round_trip_from_any_base(items: Appends, base: int) -> None:
    data = _log(items)
    records = list(scan(data, base))
    assert [(r.payload, r.producer, r.stream_seq, r.close, r.tag) for r in records] == items
    position = base
    for record in records:
        assert record.start == position
        position = record.end
    assert position == base + len(data)


@given(appends, st.data())
def test_a_torn_log_keeps_exactly_its_whole_records(items: Appends, data: st.DataObject) -> None:
    log = _log(items)
    cut = data.draw(st.integers(0, len(log)))
    ends = [r.end for r in scan(log, 0)]
    kept = list(scan(log[:cut], 0))
    assert [r.end for r in kept] == [end for end in ends if end <= cut]


@given(appends.filter(bool), st.data())
def test_a_corrupt_byte_ends_the_scan_before_its_record(
    items: Appends, data: st.DataObject
) -> None:
    log = bytearray(_log(items))
    records = list(scan(bytes(log), 0))
    victim = data.draw(st.sampled_from(records))
    at = data.draw(st.integers(victim.start + HEADER, victim.end - 1))
    log[at] ^= 0xFF
    kept = list(scan(bytes(log), 0))
    assert [r.end for r in kept] == [r.end for r in records if r.end <= victim.start]


@given(appends)
def test_payloads_join_the_payloads(items: Appends) -> None:
    log = _log(items)
    joined, end = payloads(log, 7)
    assert joined == b"".join(payload for payload, *_ in items)
    assert end == 7 + len(log)
