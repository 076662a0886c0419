"""decode_json: every way untrusted JSON fails is one JSONInputError with a reason."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core.errors import JSONInputError
from sandstream.core.json_input import decode_json


class Point(msgspec.Struct):
    x: int
    y: int = 0


DEEP = b"[" * 100_000 + b"]" * 100_000


def test_valid_json_decodes_to_python_values_and_types() -> None:
    assert decode_json(b'{"a": [1, "\xc3\xa9", null]}') == {"a": [1, "é", None]}
    assert decode_json('{"x": 3}', Point) == Point(x=3)


@pytest.mark.parametrize(
    ("data", "reason", "needle"),
    [
        (b"{not json", "invalid_json", "malformed"),
        (b"", "invalid_json", "truncated"),
        (b'["ok", "\xff"]', "invalid_utf8", "byte 0xff at offset 8"),
        (b'{"x": 1, "skipped": ' + DEEP + b"}", "too_deep", "nested too deeply"),
        (b'{"x": "three"}', "invalid_value", "Expected `int`, got `str`"),
        (b"[1, 2]", "invalid_value", "Expected `object`"),
    ],
)
def test_each_failure_is_a_json_input_error(data: bytes, reason: str, needle: str) -> None:
    with pytest.raises(JSONInputError) as info:
        decode_json(data, Point)
    assert info.value.reason == reason
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


def test_nesting_too_deep_without_a_type() -> None:
    with pytest.raises(JSONInputError, match="nested too deeply") as info:
        decode_json(b'{"a": ' * 50_000 + b"1" + b"}" * 50_000)
    assert info.value.reason == "too_deep"


def test_invalid_utf8_in_a_field_msgspec_would_skip_is_refused() -> None:
    # Unknown fields are skipped by msgspec without checking their bytes.
    with pytest.raises(JSONInputError) as info:
        decode_json(b'{"x": 1, "ignored": "\xc3("}', Point)
    assert info.value.reason == "invalid_utf8"


def test_a_str_with_lone_surrogates_is_refused() -> None:
    with pytest.raises(JSONInputError) as info:
        decode_json('["\ud800"]')
    assert info.value.reason == "invalid_utf8"


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_json_input_error(data: bytes) -> None:
    try:
        value = decode_json(data)
    except JSONInputError as exc:
        assert exc.reason in ("invalid_json", "invalid_utf8", "too_deep")
    else:
        assert msgspec.json.decode(msgspec.json.encode(value)) == value


@given(st.recursive(st.none() | st.integers() | st.text(), lambda c: st.lists(c, max_size=3)))
def test_valid_documents_round_trip(value: object) -> None:
    assert decode_json(msgspec.json.encode(value)) == value
