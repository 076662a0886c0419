"""parse_cursor accepts exactly the canonical decimal form of 0 … MAX_CURSOR;
resume_cursor prefers Last-Event-ID over ?cursor=."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sandstream.core.cursors import MAX_CURSOR, parse_cursor, resume_cursor
from sandstream.core.errors import CursorError, SandstreamError

cursors = st.integers(min_value=0, max_value=MAX_CURSOR)


@given(cursors)
def test_every_cursor_in_range_round_trips(value: int) -> None:
    assert parse_cursor(str(value)) == value


@given(st.text(max_size=30))
@example("٣")
@example("\uff11")  # FULLWIDTH DIGIT ONE
@example("+1")
@example(" 1")
@example("1 ")
@example("3_0")
@example("01")
@example("-0")
@example("1e3")
@example("")
@example("²")
@example(str(2**70))
@example(str(MAX_CURSOR))
@example(str(MAX_CURSOR + 1))
def test_a_text_is_a_cursor_exactly_when_it_is_the_canonical_form(text: str) -> None:
    canonical = text.isascii() and text.isdigit() and str(int(text)) == text
    if canonical and int(text) <= MAX_CURSOR:
        assert parse_cursor(text) == int(text)
    else:
        with pytest.raises(CursorError):
            parse_cursor(text)


@given(st.text(alphabet="0123456789", min_size=1, max_size=40))
def test_digit_strings_are_refused_for_a_leading_zero_or_the_bound(text: str) -> None:
    try:
        value = parse_cursor(text)
    except CursorError:
        assert (text[0] == "0" and len(text) > 1) or int(text) > MAX_CURSOR
    else:
        assert str(value) == text and value <= MAX_CURSOR


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "cursor is empty"),
        ("3_0", "got '3_0'"),
        ("٣", "ASCII digits only"),
        ("0" * 10_000 + "1", "leading zero"),
        (str(2**70), f"at most {MAX_CURSOR}"),
    ],
)
def test_the_message_says_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(CursorError) as caught:
        parse_cursor(text)
    assert needle in str(caught.value)
    assert len(str(caught.value)) < 200  # the value is quoted cut, never whole
    assert isinstance(caught.value, SandstreamError)
    assert isinstance(caught.value, ValueError)


def test_the_message_names_the_field() -> None:
    with pytest.raises(CursorError, match=r"^Last-Event-ID must be"):
        resume_cursor(None, "+1")


@given(st.none() | cursors.map(str), st.none() | st.just("") | cursors.map(str))
def test_last_event_id_wins_over_the_query(query: str | None, last_event_id: str | None) -> None:
    expected = last_event_id or query
    assert resume_cursor(query, last_event_id) == (None if expected is None else int(expected))


@pytest.mark.parametrize(("query", "last_event_id"), [("+1", "5"), ("5", "3_0"), ("", None)])
def test_a_malformed_cursor_is_refused_whichever_wins(
    query: str | None, last_event_id: str | None
) -> None:
    with pytest.raises(CursorError):
        resume_cursor(query, last_event_id)
