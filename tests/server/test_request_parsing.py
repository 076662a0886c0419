"""Properties of the request parsers: JSON bodies, ids, titles, integer query values.

Whatever the input, a parser either accepts it or raises the one refusal the route
turns into a 4xx problem; nothing else escapes (an escaping exception is a 500).
"""

from __future__ import annotations

import re
import string

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from quart_trio import QuartTrio

from sandstream.core.schemas import Dispatch
from sandstream.server.chat.api.bodies import CreateChatRequest, check_id
from sandstream.server.chat.model.requests import ChatStreamRequest, Identifier, Title
from sandstream.server.http.errors import BadRequestError
from sandstream.server.http.requests import decode_json, int_query

SCHEMAS = st.sampled_from([Dispatch, ChatStreamRequest, CreateChatRequest])
JSON_ISH = st.lists(
    st.sampled_from([b"{", b"}", b"[", b"]", b'"', b":", b",", b"1", b"\xff", b"\xc3", b"a"])
    | st.binary(max_size=4),
    max_size=60,
).map(b"".join)


@given(SCHEMAS, st.binary(max_size=200) | JSON_ISH)
def test_any_bytes_are_decoded_or_refused_with_a_422(schema: type, data: bytes) -> None:
    try:
        decode_json(data, schema)
    except BadRequestError as refusal:
        assert refusal.response.status_code == 422


@given(SCHEMAS, st.integers(min_value=1, max_value=200_000), st.sampled_from(["[", '{"a":']))
def test_any_nesting_depth_is_decoded_or_refused_with_a_422(
    schema: type, depth: int, opener: str
) -> None:
    closer = "]" if opener == "[" else "}"
    nested = (opener * depth + "1" + closer * depth).encode()
    try:
        decode_json(b'{"x": ' + nested + b', "workspaceId": "w"}', schema)
    except BadRequestError as refusal:
        assert refusal.response.status_code == 422


@given(st.binary(min_size=1, max_size=8).filter(lambda b: not _is_utf8(b)))
def test_invalid_utf8_inside_a_string_is_a_422(raw: bytes) -> None:
    body = b'{"workspaceId": "w' + raw + b'", "message": "hi"}'
    try:
        decode_json(body, ChatStreamRequest)
    except BadRequestError as refusal:
        assert refusal.response.status_code == 422
    else:
        raise AssertionError("invalid UTF-8 was accepted")


ID_ALPHABET = string.ascii_letters + string.digits + "._:@-"


@given(st.text(alphabet=ID_ALPHABET + " \n\r\t/\x00é٣", max_size=210))
def test_the_id_check_and_the_body_schema_agree(value: str) -> None:
    expected = (
        1 <= len(value) <= 200
        and all(c in ID_ALPHABET for c in value)
        and value[0] in string.ascii_letters + string.digits
    )
    try:
        check_id(value, "id")
        by_helper = True
    except BadRequestError:
        by_helper = False
    try:
        msgspec.convert(value, Identifier)
        by_schema = True
    except msgspec.ValidationError:
        by_schema = False
    assert by_helper == by_schema == expected, value


@given(st.text(max_size=220))
def test_a_title_is_accepted_iff_it_is_short_and_has_no_control_character(title: str) -> None:
    expected = len(title) <= 200 and not re.search(r"[\x00-\x1f\x7f-\x9f]", title)
    try:
        msgspec.convert(title, Title)
        accepted = True
    except msgspec.ValidationError:
        accepted = False
    assert accepted == expected, title


app = QuartTrio(__name__)


@given(st.text(max_size=25))
async def test_limit_is_ascii_digits_only(raw: str) -> None:
    expected = re.fullmatch(r"-?[0-9]{1,18}", raw) is not None and 1 <= int(raw) <= 500
    async with app.test_request_context("/", query_string={"limit": raw}):
        try:
            value = int_query("limit", 100, minimum=1, maximum=500)
        except BadRequestError as refusal:
            assert refusal.response.status_code == 422
            accepted = False
        else:
            accepted = True
            assert raw == "" or value == int(raw)
    assert accepted == (expected or raw == ""), raw


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
