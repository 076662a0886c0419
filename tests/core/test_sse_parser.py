"""Tests for the incremental SSE parser (WHATWG "event stream interpretation")."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import TypeAlias, assert_type

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandstream.core.errors import SSEParseError, SSEParserClosedError
from sandstream.core.sse_parser import Comment, ServerSentEvent, SSEParser

Item: TypeAlias = ServerSentEvent | Comment


def parse(data: bytes, *, comments: bool = False, **kwargs: int) -> list[Item]:
    parser = SSEParser(include_comments=comments, **kwargs)
    out: list[Item] = [*parser.feed(data)]
    out += parser.close()
    return out


def parse_chunks(chunks: Sequence[bytes], *, comments: bool = False) -> list[Item]:
    parser = SSEParser(include_comments=comments)
    out: list[Item] = []
    for chunk in chunks:
        out += parser.feed(chunk)
    out += parser.close()
    return out


def ev(data: str, event: str = "message", id: str = "", retry: int | None = None) -> Item:
    return ServerSentEvent(event=event, data=data, id=id, retry=retry)


# --- The WHATWG spec's own examples ------------------------------------------------


def test_spec_example_multiline_data() -> None:
    stream = b"data: YHOO\ndata: +2\ndata: 10\n\n"
    assert parse(stream) == [ev("YHOO\n+2\n10")]


def test_spec_example_ids_and_unterminated_last_block() -> None:
    stream = (
        b": test stream\n"
        b"\n"
        b"data: first event\n"
        b"id: 1\n"
        b"\n"
        b"data:second event\n"
        b"id\n"
        b"\n"
        b"data:  third event\n"
    )
    parser = SSEParser()
    events = parser.feed(stream)
    assert events == [ev("first event", id="1"), ev("second event", id="")]
    # The last block is never dispatched: end of stream is not a blank line.
    assert parser.close() == []
    assert parser.last_event_id == ""


def test_spec_example_third_event_keeps_its_extra_space_when_terminated() -> None:
    assert parse(b"data:  third event\n\n") == [ev(" third event")]


def test_spec_example_empty_data_fields() -> None:
    stream = b"data\n\ndata\ndata\n\ndata:\n"
    assert parse(stream) == [ev(""), ev("\n")]


def test_spec_example_space_after_colon_is_optional() -> None:
    assert parse(b"data:test\n\ndata: test\n\n") == [ev("test"), ev("test")]


# --- Line endings -------------------------------------------------------------------


@pytest.mark.parametrize(
    "stream",
    [
        b"data: a\ndata: b\n\n",
        b"data: a\rdata: b\r\r",
        b"data: a\r\ndata: b\r\n\r\n",
        b"data: a\rdata: b\r\n\n",
        b"data: a\r\ndata: b\n\r",
    ],
)
def test_cr_lf_and_crlf_all_end_lines(stream: bytes) -> None:
    assert parse(stream) == [ev("a\nb")]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    # If the CR and the LF counted as two line ends, the LF would be a blank line
    # dispatching "a" alone.
    assert parse_chunks([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [ev("a\nb")]


def test_cr_then_empty_chunk_then_lf_is_still_one_line_end() -> None:
    assert parse_chunks([b"data: a\r", b"", b"\ndata: b\n\n"]) == [ev("a\nb")]


def test_two_crs_are_two_line_ends() -> None:
    assert parse_chunks([b"data: a\r", b"\r"]) == [ev("a")]


def test_lf_cr_is_two_line_ends() -> None:
    assert parse(b"data: a\n\r") == [ev("a")]


@pytest.mark.parametrize(
    "char", ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
)
def test_other_unicode_line_breaks_are_ordinary_characters(char: str) -> None:
    stream = f"data: a{char}b\nid: x{char}y\nevent: e{char}f\n\n".encode()
    assert parse(stream) == [ev(f"a{char}b", event=f"e{char}f", id=f"x{char}y")]


# --- Decoding -----------------------------------------------------------------------


def test_leading_bom_is_stripped_once() -> None:
    assert parse(b"\xef\xbb\xbfdata: a\n\n") == [ev("a")]
    # A second BOM is part of the first field name, which is then unknown.
    assert parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n") == []


def test_bom_split_across_chunks_is_stripped() -> None:
    assert parse_chunks([b"\xef", b"\xbb", b"\xbfdata: a\n\n"]) == [ev("a")]


def test_bom_later_in_stream_is_kept() -> None:
    assert parse(b"data: \xef\xbb\xbfa\n\n") == [ev("\ufeffa")]


def test_multibyte_characters_split_across_chunks_decode_right() -> None:
    text = "data: é€😀\n\n".encode()
    assert parse_chunks([text[i : i + 1] for i in range(len(text))]) == [ev("é€😀")]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert parse(b"data: a\xffb\xc3\n\n") == [ev("a\ufffdb\ufffd")]


def test_truncated_multibyte_at_end_of_stream_is_discarded_with_the_line() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: ok\n\ndata: \xe2\x82") == [ev("ok")]
    assert parser.close() == []


def test_nul_in_data_is_kept() -> None:
    assert parse(b"data: a\x00b\n\n") == [ev("a\x00b")]


# --- Fields -------------------------------------------------------------------------


def test_event_type_applies_to_one_event_only() -> None:
    stream = b"event: add\ndata: 1\n\ndata: 2\n\n"
    assert parse(stream) == [ev("1", event="add"), ev("2")]


def test_event_type_without_data_is_reset_at_blank_line() -> None:
    assert parse(b"event: add\n\ndata: x\n\n") == [ev("x")]


def test_empty_event_type_means_message() -> None:
    assert parse(b"event:\ndata: x\n\n") == [ev("x")]


def test_last_event_id_persists_across_events() -> None:
    stream = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\n"
    assert parse(stream) == [ev("a", id="1"), ev("b", id="1"), ev("c", id="2")]


def test_id_with_nul_is_ignored() -> None:
    parser = SSEParser()
    events = parser.feed(b"id: 1\ndata: a\n\nid: x\x00y\ndata: b\n\n")
    assert events == [ev("a", id="1"), ev("b", id="1")]
    assert parser.last_event_id == "1"


def test_id_without_data_still_sets_last_event_id_at_dispatch() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 7\n") == []
    assert parser.last_event_id == ""  # only a blank line commits the id
    assert parser.feed(b"\n") == []
    assert parser.last_event_id == "7"


def test_id_buffer_is_not_committed_at_end_of_stream() -> None:
    parser = SSEParser()
    parser.feed(b"id: 1\n\nid: 2\ndata: x\n")
    parser.close()
    assert parser.last_event_id == "1"


def test_retry_sets_reconnection_time_immediately() -> None:
    parser = SSEParser()
    assert parser.retry is None
    assert parser.feed(b"retry: 3000\n") == []
    assert parser.retry == 3000
    assert parser.feed(b"data: a\n\n") == [ev("a", retry=3000)]


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b" 100",  # two spaces after the colon: the value starts with a space
        b"100 ",
        b"-1",
        b"+5",
        b"1_000",
        b"1e3",
        b"30a0",
        b"0x10",
        "١٢".encode(),  # non-ASCII digits
        "²".encode(),
        b"1" * 25,  # overflows any integer a browser uses
    ],
)
def test_invalid_retry_is_ignored(value: bytes) -> None:
    parser = SSEParser()
    assert parser.feed(b"retry: 1\nretry: " + value + b"\ndata: x\n\n") == [ev("x", retry=1)]
    assert parser.retry == 1


def test_retry_with_leading_zeros_is_a_number() -> None:
    parser = SSEParser()
    parser.feed(b"retry:" + b"0" * 40 + b"15\n")
    assert parser.retry == 15


def test_field_without_colon_has_empty_value() -> None:
    assert parse(b"data\n\n") == [ev("")]
    assert parse(b"event\ndata: x\n\n") == [ev("x")]


def test_only_one_leading_space_is_removed_and_trailing_space_is_kept() -> None:
    assert parse(b"data:   a  \n\n") == [ev("  a  ")]


def test_tab_after_colon_is_not_removed() -> None:
    assert parse(b"data:\ta\n\n") == [ev("\ta")]


def test_value_may_contain_colons() -> None:
    assert parse(b"data: a: b:c\n\n") == [ev("a: b:c")]


def test_unknown_and_differently_cased_fields_are_ignored() -> None:
    assert parse(b"Data: x\nfoo: bar\n data: y\n\n") == []
    assert parse(b"foo: bar\ndata: x\n\n") == [ev("x")]


def test_blank_lines_without_data_dispatch_nothing() -> None:
    assert parse(b"\n\n\r\n\r") == []


def test_event_ending_at_end_of_stream_is_discarded() -> None:
    assert parse(b"data: a\n") == []
    assert parse(b"data: a") == []
    assert parse(b"data: a\n\ndata: b\n") == [ev("a")]


# --- Comments -----------------------------------------------------------------------


def test_comments_are_skipped_by_default() -> None:
    assert parse(b": ping\n\n:\n:x\ndata: a\n\n") == [ev("a")]


def test_comments_are_returned_in_order_when_asked() -> None:
    stream = b": ping\n\n:\n:no space\n:  two\ndata: a\n: mid\n\n"
    assert parse(stream, comments=True) == [
        Comment("ping"),
        Comment(""),
        Comment("no space"),
        Comment(" two"),
        Comment("mid"),
        ev("a"),
    ]


def test_comment_does_not_end_an_event() -> None:
    assert parse(b"data: a\n: c\ndata: b\n\n") == [ev("a\nb")]


# --- Lifecycle and bounds -----------------------------------------------------------


def test_feed_after_close_raises_and_close_is_idempotent() -> None:
    parser = SSEParser()
    assert parser.close() == []
    assert parser.close() == []
    with pytest.raises(SSEParserClosedError):
        parser.feed(b"data: a\n\n")


def test_line_at_the_bound_is_accepted() -> None:
    line = b"data: " + b"x" * 94
    assert parse(line + b"\n\n", max_line_chars=100) == [ev("x" * 94)]


def test_line_over_the_bound_in_one_chunk_raises() -> None:
    with pytest.raises(SSEParseError):
        parse(b"data: " + b"x" * 95 + b"\n\n", max_line_chars=100)


def test_unterminated_line_over_the_bound_raises_before_buffering_more() -> None:
    parser = SSEParser(max_line_chars=100)
    for _ in range(100):
        parser.feed(b"x")
    with pytest.raises(SSEParseError):
        parser.feed(b"x")
    with pytest.raises(SSEParserClosedError):
        parser.feed(b"\n\n")


def test_bound_counts_characters_not_bytes() -> None:
    line = ("data: " + "€" * 10).encode()  # 16 chars, 36 bytes
    assert parse(line + b"\n\n", max_line_chars=16) == [ev("€" * 10)]


def test_parse_error_is_a_value_error() -> None:
    assert issubclass(SSEParseError, ValueError)


def test_event_data_over_the_bound_raises() -> None:
    parser = SSEParser(max_data_chars=10)
    assert parser.feed(b"data: 1234\ndata: 1234\n") == []  # 5 + 5 chars with the LFs
    with pytest.raises(SSEParseError):
        parser.feed(b"data: \n")


def test_data_bound_resets_after_each_event() -> None:
    stream = b"data: 123456789\n\n" * 5
    assert parse(stream, max_data_chars=10) == [ev("123456789")] * 5


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_line_chars must be positive"):
        SSEParser(max_line_chars=0)
    with pytest.raises(ValueError, match="max_data_chars must be positive"):
        SSEParser(max_data_chars=-1)


def test_item_type_follows_include_comments() -> None:
    # Checked by mypy; at run time, both parsers return lists.
    plain = SSEParser().feed(b"data: x\n\n")
    assert_type(plain, list[ServerSentEvent])
    mixed = SSEParser(include_comments=True).feed(b": c\n")
    assert_type(mixed, list[ServerSentEvent | Comment])
    assert (plain, mixed) == ([ev("x")], [Comment("c")])


def test_events_are_frozen_and_have_spec_defaults() -> None:
    event = ServerSentEvent(data="x")
    assert (event.event, event.id, event.retry) == ("message", "", None)
    with pytest.raises(AttributeError):
        event.data = "y"  # type: ignore[misc]
    assert msgspec.json.decode(msgspec.json.encode(event), type=ServerSentEvent) == event


# --- Reconnecting ---------------------------------------------------------------------


def test_reconnect_keeps_last_event_id_and_retry_for_the_next_connection() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 7\nretry: 250\ndata: a\n\n") == [ev("a", id="7", retry=250)]
    parser.close()
    parser.reconnect()
    assert (parser.last_event_id, parser.retry) == ("7", 250)
    assert parser.feed(b"data: b\n\n") == [ev("b", id="7", retry=250)]


def test_reconnect_drops_the_unfinished_event_with_its_id() -> None:
    parser = SSEParser()
    parser.feed(b"id: 1\ndata: a\n\nid: 2\nevent: e\ndata: lost\n")
    parser.reconnect()
    assert parser.last_event_id == "1"
    assert parser.feed(b"data: b\n\n") == [ev("b", id="1")]


def test_reconnect_keeps_a_retry_from_the_unfinished_event() -> None:
    parser = SSEParser()
    parser.feed(b"retry: 900\ndata: lost\n")
    parser.reconnect()
    assert parser.retry == 900


def test_reconnect_drops_a_partial_line() -> None:
    parser = SSEParser()
    parser.feed(b"data: half a li")
    parser.reconnect()
    assert parser.feed(b"ne\ndata: c\n\n") == [ev("c")]


def test_reconnect_drops_a_partial_utf8_sequence_and_allows_a_new_bom() -> None:
    parser = SSEParser()
    parser.feed(b"\xef\xbb\xbfdata: a\n\ndata: \xe2\x82")
    parser.reconnect()
    assert parser.feed(b"\xef\xbb\xbfdata: \xe2\x82\xac\n\n") == [ev("\u20ac")]


def test_reconnect_reopens_a_closed_or_failed_parser() -> None:
    parser = SSEParser(max_line_chars=8)
    parser.close()
    parser.reconnect()
    assert parser.feed(b"data: a\n\n") == [ev("a")]
    with pytest.raises(SSEParseError):
        parser.feed(b"data: far too long\n")
    with pytest.raises(SSEParserClosedError):
        parser.feed(b"\n")
    parser.reconnect()
    assert parser.feed(b"data: b\n\n") == [ev("b")]


# --- Properties ---------------------------------------------------------------------

_TOKENS = [
    b"data",
    b"event",
    b"id",
    b"retry",
    b":",
    b": ",
    b" ",
    b"\r",
    b"\n",
    b"\r\n",
    b"\n\n",
    b"x",
    b"12",
    b"\x00",
    b"\xef\xbb\xbf",  # BOM
    "é😀\u2028\u0085".encode(),
    b"\xe2\x82",  # truncated multibyte
    b"\xff",
]

streams = st.one_of(
    st.lists(st.sampled_from(_TOKENS), max_size=60).map(b"".join),
    st.binary(max_size=200),
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def run(
    chunks: Sequence[bytes], **kwargs: int
) -> tuple[list[Item], str, int | None] | type[Exception]:
    parser = SSEParser(include_comments=True, **kwargs)
    out: list[Item] = []
    try:
        for chunk in chunks:
            out += parser.feed(chunk)
    except SSEParseError:
        return SSEParseError
    out += parser.close()
    return out, parser.last_event_id, parser.retry


@settings(max_examples=400)
@given(data=streams, cuts=st.lists(st.integers(min_value=0, max_value=250), max_size=20))
@example(data=b"data: a\r\n\r\n", cuts=[7])
@example(data=b"\xef\xbb\xbfdata: \xe2\x82\xac\n\n", cuts=[1, 2, 8, 9])
def test_any_chunking_gives_identical_results(data: bytes, cuts: list[int]) -> None:
    whole = run([data])
    assert run(split(data, cuts)) == whole
    assert run([data[i : i + 1] for i in range(len(data))]) == whole


@settings(max_examples=300)
@given(data=streams, cuts=st.lists(st.integers(min_value=0, max_value=250), max_size=20))
def test_bounds_trip_regardless_of_chunking(data: bytes, cuts: list[int]) -> None:
    whole = run([data], max_line_chars=8, max_data_chars=12)
    assert run(split(data, cuts), max_line_chars=8, max_data_chars=12) == whole


def reference_parse(data: bytes) -> tuple[list[Item], str, int | None]:
    """A direct, non-incremental transcription of the spec, to compare against."""
    text = data.decode("utf-8", errors="replace")
    text = text.removeprefix("\ufeff")
    *lines, _unterminated = re.split(r"\r\n|\r|\n", text)
    out: list[Item] = []
    data_buffer, event_type, id_buffer, last_id = "", "", "", ""
    retry: int | None = None
    for line in lines:
        if line == "":
            last_id = id_buffer
            if data_buffer:
                out.append(
                    ServerSentEvent(
                        event=event_type or "message",
                        data=data_buffer.removesuffix("\n"),
                        id=last_id,
                        retry=retry,
                    )
                )
            data_buffer = event_type = ""
            continue
        if line.startswith(":"):
            out.append(Comment(line[1:].removeprefix(" ")))
            continue
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            event_type = value
        elif field == "data":
            data_buffer += value + "\n"
        elif field == "id" and "\x00" not in value:
            id_buffer = value
        elif field == "retry" and re.fullmatch(r"0*[0-9]{1,19}", value, flags=re.ASCII):
            retry = int(value)
    return out, last_id, retry


@settings(max_examples=400)
@given(data=streams, cuts=st.lists(st.integers(min_value=0, max_value=250), max_size=20))
def test_matches_a_direct_transcription_of_the_spec(data: bytes, cuts: list[int]) -> None:
    assert run(split(data, cuts)) == reference_parse(data)
