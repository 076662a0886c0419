"""The protocol's sans-IO pieces: offsets, headers, producer rules, JSON mode, SSE
framing, cursors."""

from __future__ import annotations

import base64

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.server.streams.cursors import response_cursor
from sandstream.server.streams.errors import (
    InvalidStreamRequestError,
    ProducerSequenceGapError,
    StaleProducerEpochError,
)
from sandstream.server.streams.headers import (
    closed_flag,
    expires_at,
    producer_stamp,
    sub_offset,
    ttl_seconds,
)
from sandstream.server.streams.jsonmode import (
    MAX_JSON_DEPTH,
    json_body,
    json_depth,
    json_messages,
    json_payload,
)
from sandstream.server.streams.offsets import (
    BEGINNING,
    NOW,
    ZERO_OFFSET,
    format_offset,
    parse_offset,
    parse_read_offset,
)
from sandstream.server.streams.producers import Accept, Duplicate, ProducerState, check
from sandstream.server.streams.records import ProducerStamp
from sandstream.server.streams.sse import control_event, data_event

positions = st.integers(0, 10**16 - 1)


@given(positions, positions)
def test_offsets_sort_as_their_positions(a: int, b: int) -> None:
    assert (format_offset(a) < format_offset(b)) == (a < b)
    assert parse_offset(format_offset(a)) == a


def test_the_zero_offset_and_the_sentinels() -> None:
    assert format_offset(0) == ZERO_OFFSET
    assert parse_read_offset(None) == BEGINNING
    assert parse_read_offset("-1") == BEGINNING
    assert parse_read_offset("now") == NOW


@pytest.mark.parametrize(
    "text", ["", "0", "1_2", "0,1", "0 1", "../x", f"{ZERO_OFFSET}\n", "1" * 16 + "_" + "0" * 16]
)
def test_anything_but_a_minted_offset_is_refused(text: str) -> None:
    with pytest.raises(InvalidStreamRequestError):
        parse_read_offset(text)


@pytest.mark.parametrize("value", ["+1", "01", "1.0", "1e3", "-1", "", "x"])
def test_ttl_is_a_plain_decimal(value: str) -> None:
    with pytest.raises(InvalidStreamRequestError):
        ttl_seconds(value)
    assert ttl_seconds("0") == 0
    assert ttl_seconds("3600") == 3600


def test_expires_at_needs_a_zone() -> None:
    assert expires_at("2030-01-01T00:00:00Z") == expires_at("2030-01-01T01:00:00+01:00")
    for bad in ("2030-01-01T00:00:00", "tomorrow", "2030-13-01T00:00:00Z"):
        with pytest.raises(InvalidStreamRequestError):
            expires_at(bad)


def test_stream_closed_is_true_only_for_true() -> None:
    assert closed_flag("true") and closed_flag("TRUE")
    assert not any(closed_flag(v) for v in (None, "", "false", "1", "yes"))


def test_producer_headers_come_together_and_bounded() -> None:
    assert producer_stamp(None, None, None) is None
    assert producer_stamp("p", "1", "2") == ProducerStamp("p", 1, 2)
    for args in (
        ("p", "1", None),
        ("", "0", "0"),
        ("p", "-1", "0"),
        ("p", "0", "1e3"),
        ("p", str(2**53), "0"),
    ):
        with pytest.raises(InvalidStreamRequestError):
            producer_stamp(*args)
    with pytest.raises(InvalidStreamRequestError):
        sub_offset("-1")


def test_producer_rules() -> None:
    assert check(None, 3, 0) == Accept(ProducerState(3, 0))
    with pytest.raises(ProducerSequenceGapError) as gap:
        check(None, 0, 1)
    assert (gap.value.expected, gap.value.received) == (0, 1)
    state = ProducerState(2, 5)
    assert check(state, 2, 6) == Accept(ProducerState(2, 6))
    assert check(state, 2, 5) == Duplicate(5)
    assert check(state, 2, 0) == Duplicate(5)
    assert check(state, 3, 0) == Accept(ProducerState(3, 0))
    with pytest.raises(InvalidStreamRequestError):
        check(state, 3, 1)
    with pytest.raises(StaleProducerEpochError) as stale:
        check(state, 1, 9)
    assert stale.value.current_epoch == 2
    with pytest.raises(ProducerSequenceGapError):
        check(state, 2, 7)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(st.lists(st.lists(json_values, min_size=1, max_size=4), max_size=5))
def test_json_appends_read_back_as_one_array_of_their_messages(
    batches: list[list[object]],
) -> None:
    stored = b"".join(
        json_payload(msgspec.json.encode(batch), allow_empty=False) for batch in batches
    )
    flat = [message for batch in batches for message in batch]
    assert msgspec.json.decode(json_body(stored)) == flat
    assert len(json_messages(stored)) == len(flat)


def test_json_mode_refusals() -> None:
    with pytest.raises(InvalidStreamRequestError):
        json_payload(b"[]", allow_empty=False)
    with pytest.raises(InvalidStreamRequestError):
        json_payload(b"{nope", allow_empty=True)
    assert json_payload(b"[]", allow_empty=True) == b""
    assert json_payload(b"[[1,2],[3]]", allow_empty=False) == b"[1,2],[3],"
    with pytest.raises(InvalidStreamRequestError, match="not valid JSON"):
        json_payload(b'["\xff"]', allow_empty=False)  # invalid UTF-8


@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_json_nested_too_deep_is_a_bad_request_and_what_is_stored_reads_back(
    opener: bytes,
) -> None:
    """Deeper than the decoder goes: refused (it raised RecursionError, a 500); a
    message deeper than MAX_JSON_DEPTH: refused; at it: stored, and read back inside
    the read's array (one level more) it still decodes (the fuzz harness ``streams``:
    a bare value the decoder took on append could be one it refused on read)."""
    closer = b"]" if opener == b"[" else b"}"

    def message(depth: int) -> bytes:
        return opener * depth + b"1" + closer * depth

    with pytest.raises(InvalidStreamRequestError, match="not valid JSON"):
        json_payload(message(100_000), allow_empty=False)
    with pytest.raises(InvalidStreamRequestError, match=f"more than {MAX_JSON_DEPTH}"):
        json_payload(b"[" + message(MAX_JSON_DEPTH + 1) + b"]", allow_empty=False)
    stored = json_payload(b"[" + message(MAX_JSON_DEPTH) + b"]", allow_empty=False)
    assert json_messages(stored) == [stored]
    assert json_depth(msgspec.json.decode(json_body(stored))) == MAX_JSON_DEPTH + 1
    if opener != b"[":  # a bare value is one message (an array's elements are)
        assert json_payload(message(MAX_JSON_DEPTH), allow_empty=False) == stored


def _sse_data(event: bytes) -> bytes:
    """What an SSE reader makes of one event's data lines (WHATWG rules)."""
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    values = [line[5:][1:] if line[5:].startswith(b" ") else line[5:] for line in lines]
    return b"\n".join(values)


@given(st.text(alphabet=st.characters(blacklist_characters="\r", blacklist_categories=["Cs"])))
def test_sse_text_round_trips_and_cannot_end_its_event(text: str) -> None:
    event = data_event(text.encode(), "text")
    assert event.count(b"\n\n") == 1 and event.endswith(b"\n\n")
    assert _sse_data(event).decode() == text


@given(st.binary())
def test_sse_binary_is_base64(payload: bytes) -> None:
    event = data_event(payload, "base64")
    assert base64.b64decode(_sse_data(event).replace(b"\n", b"")) == payload


def test_sse_control_events() -> None:
    open_ = msgspec.json.decode(
        _sse_data(control_event("o", cursor="7", up_to_date=True, closed=False))
    )
    assert open_ == {"streamNextOffset": "o", "streamCursor": "7", "upToDate": True}
    done = msgspec.json.decode(
        _sse_data(control_event("o", cursor="7", up_to_date=True, closed=True))
    )
    assert done == {"streamNextOffset": "o", "streamClosed": True, "upToDate": True}


def test_cursors_move_forward() -> None:
    now = 1728432000.0 + 20 * 1000 + 5
    assert response_cursor(None, now) == "1000"
    assert response_cursor("999", now) == "1000"
    assert int(response_cursor("1000", now)) > 1000
    assert int(response_cursor("5000", now)) > 5000
    assert response_cursor("x1", now) == "1000"
