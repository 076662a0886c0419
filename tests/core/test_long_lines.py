"""The long-line splitter: whole lines as they are, over-long ones with their strings cut."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.core.errors import SplitterClosedError
from sandstream.core.json_input import decode_json
from sandstream.core.translators.long_lines import CUT_MARKER, LongLineSplitter, ShortenedLine

MAX, KEEP = 300, 40


def split(chunks: list[bytes], max_line: int = MAX, keep: int = KEEP) -> list[bytes | None]:
    splitter = LongLineSplitter(max_line, keep)
    out: list[bytes | None] = []
    for chunk in chunks:
        out += splitter.feed(chunk)
    return out + splitter.close()


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]


def check_cut(original: Any, cut: Any) -> None:
    """``cut`` is ``original`` with some strings cut to a prefix plus the marker."""
    if isinstance(original, str):
        assert isinstance(cut, str)
        if cut != original:
            head, marker, rest = cut.partition(CUT_MARKER)
            assert marker and rest.endswith(" more bytes]")
            assert original.startswith(head)
    elif isinstance(original, list):
        assert isinstance(cut, list) and len(cut) == len(original)
        for a, b in zip(original, cut, strict=True):
            check_cut(a, b)
    elif isinstance(original, dict):
        assert isinstance(cut, dict) and len(cut) == len(original)
        for (ka, va), (kb, vb) in zip(original.items(), cut.items(), strict=True):
            check_cut(ka, kb)
            check_cut(va, vb)
    else:
        assert cut == original


_text = st.text(st.characters(codec="utf-8"), max_size=120)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300)
@given(
    values=st.lists(_json, min_size=1, max_size=4),
    ascii_only=st.booleans(),
    crlf=st.booleans(),
    cuts=st.lists(st.integers(0, 3000), max_size=12),
)
def test_every_chunking_gives_the_same_lines_and_cut_lines_keep_their_shape(
    values: list[Any], ascii_only: bool, crlf: bool, cuts: list[int]
) -> None:
    end = b"\r\n" if crlf else b"\n"
    data = b"".join(json.dumps(v, ensure_ascii=ascii_only).encode() + end for v in values)
    whole = split([data])
    assert split(chunked(data, cuts)) == whole
    assert split([bytes([b]) for b in data[:400]] + [data[400:]]) == whole
    assert len(whole) == len(values)
    for value, line in zip(values, whole, strict=True):
        encoded = json.dumps(value, ensure_ascii=ascii_only).encode()
        if len(encoded) <= MAX:
            assert line == encoded and not isinstance(line, ShortenedLine)
        elif line is not None:
            assert isinstance(line, ShortenedLine) and len(line) <= MAX
            assert line.cut > 0
            check_cut(value, json.loads(line))


@pytest.mark.slow
def test_flags_after_a_huge_string_survive() -> None:
    line = json.dumps({"content": 'é\\"' * 2_000_000, "is_error": True}).encode()
    out = split(chunked(line + b"\n", list(range(0, len(line), 70_000))), 1 << 20, 1000)
    assert len(out) == 1 and isinstance(out[0], ShortenedLine)
    decoded = json.loads(out[0])
    assert decoded["is_error"] is True
    assert decoded["content"].startswith('é\\"')
    assert out[0].cut > 10_000_000


@pytest.mark.parametrize(
    ("escapes", "kept"),
    [
        (rb"\ud83d\ude00", ""),  # a pair: both halves or neither
        (rb"\ud83d\u0041", ""),  # two escapes after all: still one unit
        # A lone high half: an escape of its own, the next byte read as the string's.
        (rb"\ud83d\n", "\ud83d"),
        (rb"\ud83dx", "\ud83d"),
    ],
)
def test_escapes_after_a_high_surrogate(escapes: bytes, kept: str) -> None:
    line = b'["' + escapes + b'", "' + b"y" * 200 + b'"]'
    [whole] = split([line], 100, 12)
    assert split([bytes([b]) for b in line], 100, 12) == [whole]
    assert whole is not None
    assert json.loads(whole)[0] == json.loads(line)[0]  # 12 bytes: the whole first string
    [short] = split([line], 100, 6)
    assert split([bytes([b]) for b in line], 100, 6) == [short]
    assert short is not None
    assert json.loads(short)[0].startswith(kept + CUT_MARKER)


def test_a_character_cut_at_a_chunk_boundary_is_dropped_whole() -> None:
    # Found by tests/fuzz/claude_code.py: "€" (3 bytes) at the cut, its first byte at the
    # end of a chunk, was kept alone: not UTF-8, and not what the whole line gave.
    value = {"a": "x" * 300, "c": "€" * 100, "b": True}
    line = json.dumps(value, ensure_ascii=False).encode() + b"\n"
    [whole] = split([line], 200, 31)
    assert whole is not None
    check_cut(value, decode_json(whole))
    for cut in range(len(line)):
        assert split([line[:cut], line[cut:]], 200, 31) == [whole], cut


def test_the_cr_before_a_long_lines_end_is_dropped_before_shortening() -> None:
    # Found by tests/fuzz/acp.py: a line ending in a backslash then CRLF; fed in pieces,
    # the CR completed an escape, and the line differed from the line fed whole.
    line = b'{"a": "' + b"x" * 300 + b'", "b": "ab\\\r\n'
    [whole] = split([line], 200, 31)
    assert whole is not None and whole.endswith(b'"ab')
    for cut in range(len(line)):
        assert split([line[:cut], line[cut:]], 200, 31) == [whole], cut
    assert split([b'"' + b"y" * 300 + b"\r\r\n"], 200, 31) == split(
        [b'"' + b"y" * 300 + b"\r", b"\r\n"], 200, 31
    )


def test_a_line_still_too_long_after_cutting_is_none() -> None:
    line = json.dumps(list(range(1000))).encode()
    assert split([line + b"\nnext\n"]) == [None, b"next"]


def test_unterminated_final_line_and_blank_lines() -> None:
    assert split([b"a\n\n", b"b"]) == [b"a", b"", b"b"]
    assert split([b'"' + b"x" * 500]) == [ShortenedLine(b'"' + b"x" * KEEP)]


def test_feed_after_close_raises_and_bounds_are_checked() -> None:
    splitter = LongLineSplitter(10, 5)
    assert splitter.close() == [] and splitter.close() == []
    with pytest.raises(SplitterClosedError):
        splitter.feed(b"x")
    with pytest.raises(ValueError):
        LongLineSplitter(10, 10)


@pytest.mark.parametrize("chunk", [1, 5, 7, 1000])
def test_a_surrogate_pair_escape_is_kept_or_cut_whole(chunk: int) -> None:
    """``\\ud800\\udc00`` is one character: a cut between its halves would leave a lone
    surrogate (not UTF-8 encodable, a line no decoder takes)."""
    text = "ab" + "\U00010000" * 40
    line = json.dumps({"s": text, "flag": True}).encode()  # ASCII: \ud800\udc00 escapes
    for keep in range(4, 30):  # from 4: "flag", a string too, stays whole
        splitter = LongLineSplitter(max_line_bytes=128, keep_string_bytes=keep)
        out: list[bytes | None] = []
        for start in range(0, len(line) + 1, chunk):
            out += splitter.feed((line + b"\n")[start : start + chunk])
        [cut] = out
        assert cut is not None
        value = json.loads(cut)
        value["s"].encode("utf-8")  # no lone surrogate
        head = value["s"].partition(CUT_MARKER)[0]
        assert text.startswith(head) and value["flag"] is True
