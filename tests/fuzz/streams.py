"""Coverage-guided fuzzing of the Durable Streams parsers (server/streams: headers.py,
offsets.py, producers.py, jsonmode.py).

    python -m tests.fuzz.streams [CORPUS_DIR ...] [libFuzzer flags]

An input (:class:`~tests.fuzz.harness.Input`, two option bytes; no cut points): byte 0
(mod 5) picks the parser, byte 1 holds flags:

- 0, headers: the stream is the request headers' values split at NUL (``Stream-TTL``,
  ``Stream-Expires-At``, ``Producer-Id``, ``Producer-Epoch``, ``Producer-Seq``,
  ``Stream-Seq``, ``Stream-Fork-Sub-Offset``, ``Stream-Closed``, ``Content-Type``), read
  as Latin-1 as a server reads a header; bit ``i`` of byte 1 leaves the ``i``-th out
  (the first eight). Each parser raises :class:`InvalidStreamRequestError` and nothing
  else, for exactly what its rule (a reference of the harness's own) refuses, and
  otherwise returns what the rule reads.
- 1, offsets: the stream as an offset (UTF-8 and Latin-1 readings):
  :func:`parse_read_offset` raises :class:`InvalidStreamRequestError` only, accepts
  the two sentinels and exactly the offsets :func:`format_offset` writes, and its
  position formats back to the same text; the first eight bytes as a position
  round-trip through :func:`format_offset` and :func:`parse_offset`.
- 2, producers: the stream as appends of ``(epoch, seq)`` (a byte each), run through
  :func:`producers.check` with the state it returns: each verdict is the one the rules
  give (new data, a retry, a stale epoch, a gap, a new epoch not at 0) and the state
  only moves forward.
- 3, JSON mode: the stream as an append's body; 4: the same, the body generated
  (:class:`~tests.fuzz.values.Recipe`: a JSON array of values or one value, now and
  then nested deep or damaged). :func:`json_payload` raises
  :class:`InvalidStreamRequestError` only; what it stores reads back
  (:func:`json_body`, :func:`json_messages`) as the body's elements (its value when
  it is not an array), and an empty array only when a create allows it (byte 1 bit 0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Final

import atheris

with atheris.instrument_imports(
    include=[
        "sandstream.server.streams.headers",
        "sandstream.server.streams.offsets",
        "sandstream.server.streams.producers",
        "sandstream.server.streams.jsonmode",
    ]
):
    from sandstream.server.streams import headers, jsonmode, offsets, producers
    from sandstream.server.streams.errors import (
        InvalidStreamRequestError,
        ProducerSequenceGapError,
        StaleProducerEpochError,
    )
    from sandstream.server.streams.records import MAX_FIELD, ProducerStamp

from sandstream.core import JSONInputError, decode_json
from tests.fuzz.harness import Input, fuzz
from tests.fuzz.values import Recipe

__all__ = ["StreamsMismatch", "check"]

HEADERS: Final = (
    "Stream-TTL",
    "Stream-Expires-At",
    "Producer-Id",
    "Producer-Epoch",
    "Producer-Seq",
    "Stream-Seq",
    "Stream-Fork-Sub-Offset",
    "Stream-Closed",
    "Content-Type",
)
MAX_SAFE_INTEGER: Final = 2**53 - 1
_DIGITS: Final = "0123456789"
_DATE_TIME: Final = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}"
_RFC3339: Final = _DATE_TIME + r"(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"


class StreamsMismatch(AssertionError):
    """A parser accepted what its rule refuses, refused what it accepts, read it
    differently, or failed in another way."""


def _refused(call: Any, *args: Any) -> tuple[bool, Any]:
    """(refused, value): ``call(*args)``, :class:`InvalidStreamRequestError` as refused."""
    try:
        return False, call(*args)
    except InvalidStreamRequestError:
        return True, None


def _ascii_integer(text: str, most: int) -> int | None:
    """``text`` stripped as ASCII digits, 1 to ``most`` of them; else ``None``."""
    text = text.strip()
    if not 1 <= len(text) <= most or any(c not in _DIGITS for c in text):
        return None
    return int(text)


def _expected_ttl(value: str) -> int | None:
    text = value.strip()
    number = _ascii_integer(text, 16)
    if number is None or (len(text) > 1 and text[0] == "0"):
        return None
    return number


def _expected_expiry(value: str) -> float | None:
    """Seconds of an RFC 3339 time with a zone (ASCII digits; a ``T``, ``t`` or space);
    ``None`` for anything else."""
    text = value.strip()
    if not re.fullmatch(_RFC3339, text, re.ASCII):
        return None
    try:
        return datetime.fromisoformat(text.replace("z", "Z")).timestamp()
    except ValueError:
        return None


def _check_headers(values: dict[str, str | None]) -> None:
    ttl, expiry = values["Stream-TTL"], values["Stream-Expires-At"]
    refused, got = _refused(headers.ttl_seconds, ttl)
    want = None if ttl is None else _expected_ttl(ttl)
    if (refused, got) != (ttl is not None and want is None, want):
        raise StreamsMismatch(f"Stream-TTL {ttl!r}: {refused=} {got!r}, want {want!r}")
    refused, got = _refused(headers.expires_at, expiry)
    want_at = None if expiry is None else _expected_expiry(expiry)
    if refused != (expiry is not None and want_at is None) or (not refused and got != want_at):
        raise StreamsMismatch(f"Stream-Expires-At {expiry!r}: {refused=} {got!r}, want {want_at!r}")
    _check_producer(values["Producer-Id"], values["Producer-Epoch"], values["Producer-Seq"])
    seq = values["Stream-Seq"]
    refused, got = _refused(headers.stream_seq, seq)
    too_long = seq is not None and len(seq.encode()) > MAX_FIELD
    if refused != too_long or (not refused and got != seq):
        raise StreamsMismatch(f"Stream-Seq of {len(seq or '')} characters: {refused=}")
    sub = values["Stream-Fork-Sub-Offset"]
    refused, got = _refused(headers.sub_offset, sub)
    want_sub = 0 if sub is None else _ascii_integer(sub, 16)
    if (refused, got) != (want_sub is None, want_sub):
        raise StreamsMismatch(f"Stream-Fork-Sub-Offset {sub!r}: {refused=} {got!r}")
    closed = values["Stream-Closed"]
    if headers.closed_flag(closed) != (closed is not None and closed.strip().lower() == "true"):
        raise StreamsMismatch(f"Stream-Closed {closed!r}")
    content_type = values["Content-Type"] or ""
    media = headers.media_type(content_type)
    if media != media.strip().lower() or ";" in media or headers.media_type(media) != media:
        raise StreamsMismatch(f"Content-Type {content_type!r} gives the media type {media!r}")
    if jsonmode.is_json(content_type) != (media == "application/json"):
        raise StreamsMismatch(f"Content-Type {content_type!r}: is_json disagrees with {media!r}")


def _check_producer(producer_id: str | None, epoch: str | None, seq: str | None) -> None:
    given = [value is not None for value in (producer_id, epoch, seq)]
    refused, got = _refused(headers.producer_stamp, producer_id, epoch, seq)
    if not any(given):
        want: ProducerStamp | None = None
    elif not all(given):
        want = None
    else:
        assert producer_id is not None and epoch is not None and seq is not None
        numbers = [_ascii_integer(epoch, 16), _ascii_integer(seq, 16)]
        fits = 1 <= len(producer_id.encode()) <= MAX_FIELD
        if fits and all(n is not None and n <= MAX_SAFE_INTEGER for n in numbers):
            want = ProducerStamp(producer_id, numbers[0] or 0, numbers[1] or 0)
        else:
            want = None
    want_refused = any(given) and want is None
    if (refused, got) != (want_refused, want):
        raise StreamsMismatch(
            f"producer {producer_id!r} {epoch!r} {seq!r}: {refused=} {got!r}, want {want!r}"
        )


def _check_offset(text: str) -> None:
    refused, got = _refused(offsets.parse_read_offset, text)
    canonical = re.fullmatch(r"0{16}_[0-9]{16}", text, re.ASCII) is not None
    if text in (offsets.BEGINNING, offsets.NOW):
        if got != text:
            raise StreamsMismatch(f"the sentinel {text!r} read as {got!r}")
        return
    if refused == canonical:
        raise StreamsMismatch(f"offset {text!r}: {refused=}, canonical {canonical}")
    if not refused and offsets.format_offset(got) != text:
        raise StreamsMismatch(f"offset {text!r} read as {got}, which writes back differently")


def _check_offset_round_trip(data: bytes) -> None:
    position = int.from_bytes(data[:8].ljust(8, b"\0"), "big")
    try:
        text = offsets.format_offset(position)
    except ValueError:
        if position < 10**16:
            raise StreamsMismatch(f"position {position} refused") from None
        return
    if position >= 10**16 or offsets.parse_offset(text) != position:
        raise StreamsMismatch(f"position {position} as {text!r} does not read back")
    if offsets.parse_read_offset(text) != position:
        raise StreamsMismatch(f"position {position} as {text!r} is not a read offset")


def _check_producers(data: bytes) -> None:
    state: producers.ProducerState | None = None
    for epoch, seq in zip(data[0::2], data[1::2], strict=False):
        try:
            verdict: Any = producers.check(state, epoch, seq)
        except (StaleProducerEpochError, ProducerSequenceGapError, InvalidStreamRequestError) as e:
            verdict = type(e)
        want: Any
        if state is None:
            want = (
                producers.Accept(producers.ProducerState(epoch, 0))
                if seq == 0
                else (ProducerSequenceGapError)
            )
        elif epoch < state.epoch:
            want = StaleProducerEpochError
        elif epoch > state.epoch:
            accepted = producers.Accept(producers.ProducerState(epoch, 0))
            want = accepted if seq == 0 else InvalidStreamRequestError
        elif seq <= state.last_seq:
            want = producers.Duplicate(state.last_seq)
        elif seq == state.last_seq + 1:
            want = producers.Accept(producers.ProducerState(epoch, seq))
        else:
            want = ProducerSequenceGapError
        if verdict != want:
            raise StreamsMismatch(f"{state} then ({epoch}, {seq}): {verdict!r}, want {want!r}")
        if isinstance(verdict, producers.Accept):
            state = verdict.state


def _check_json(body: bytes, allow_empty: bool) -> None:
    try:
        value = decode_json(body)
    except JSONInputError:
        value = _NOT_JSON
    try:
        payload = jsonmode.json_payload(body, allow_empty=allow_empty)
    except InvalidStreamRequestError:
        elements = value if isinstance(value, list) else [value]
        deepest = _text_depth(body) - (1 if isinstance(value, list) else 0)
        too_deep = deepest > jsonmode.MAX_JSON_DEPTH
        if value is _NOT_JSON or (value == [] and not allow_empty) or too_deep:
            return
        raise StreamsMismatch(f"valid JSON refused: {body[:200]!r}") from None
    if value is _NOT_JSON:
        raise StreamsMismatch(f"not JSON, stored: {body[:200]!r}")
    elements = value if isinstance(value, list) else [value]
    if decode_json(jsonmode.json_body(payload)) != elements:
        raise StreamsMismatch(f"{body[:200]!r} reads back as {jsonmode.json_body(payload)[:200]!r}")
    messages = jsonmode.json_messages(payload)
    if b"".join(messages) != payload or [decode_json(m[:-1]) for m in messages] != elements:
        raise StreamsMismatch(f"{body[:200]!r}: the stored messages are not its elements")


_NOT_JSON: Final = object()


def _text_depth(body: bytes) -> int:
    """How deep the brackets of a JSON text nest, outside its strings."""
    deepest = depth = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def generate_json(recipe: Recipe) -> bytes:
    """An append's body: a JSON array of values or one value; now and then nested
    around :data:`~jsonmode.MAX_JSON_DEPTH` deep, or damaged."""
    kind = recipe.number(0, 4)
    if kind == 0:
        depth = jsonmode.MAX_JSON_DEPTH + recipe.number(-2, 2)
        inner = recipe.pick("[", '{"a":')
        closing = "]" if inner == "[" else "}"
        text = inner * depth + "1" + closing * depth
        return (f"[{text}]" if recipe.flag() else text).encode()
    value: Any = (
        [recipe.value() for _ in range(recipe.number(0, 5))] if kind < 4 else recipe.value()
    )
    data = json.dumps(value, ensure_ascii=recipe.flag()).encode("utf-8", "surrogatepass")
    if recipe.number(0, 7) == 0 and data:
        cut = recipe.number(0, len(data) - 1)
        data = data[:cut] + bytes([recipe.number(0, 255)]) + data[cut + 1 :]
    return data


def check(data: bytes) -> None:
    case = Input.decode(data, 2)
    mode, flags = case.options[0] % 5, case.options[1]
    if mode == 0:
        fields = case.stream.decode("latin-1").split("\0")
        values: dict[str, str | None] = {}
        for index, name in enumerate(HEADERS):
            text = fields[index] if index < len(fields) else ""
            values[name] = None if index < 8 and flags >> index & 1 else text
        _check_headers(values)
    elif mode == 1:
        for text in (case.stream.decode("utf-8", "replace"), case.stream.decode("latin-1")):
            _check_offset(text)
        _check_offset_round_trip(case.stream)
    elif mode == 2:
        _check_producers(case.stream)
    else:
        body = case.stream if mode == 3 else generate_json(Recipe(case.stream))
        _check_json(body, allow_empty=bool(flags & 1))


def test_one_input(data: bytes) -> None:
    check(data)


def _input(mode: int, flags: int, stream: bytes) -> bytes:
    return Input(bytes([mode, flags]), (), stream).encode()


def seeds() -> Iterator[bytes]:
    yield _input(0, 0, "\0".join(["3600", "2030-01-02T03:04:05Z", "p1", "0", "0", "a", "2",
                                  "true", "application/json; charset=utf-8"]).encode())  # fmt: skip
    yield _input(0, 0, "\0".join(["007", "2030-01-02 03:04:05.5+01:00", "", "9007199254740992",
                                  "1", "", " 3 ", "TRUE ", "Text/Plain"]).encode())  # fmt: skip
    yield _input(0, 0b1111, b"\0\0\0\0\0\0x\0false\0")
    yield _input(1, 0, b"0000000000000000_0000000000000042")
    for text in (b"-1", b"now", b"", b"0000000000000001_0000000000000000", b"\xff"):
        yield _input(1, 0, text)
    yield _input(2, 0, bytes([0, 0, 0, 1, 0, 1, 0, 3, 1, 0, 1, 2, 0, 0, 2, 1]))
    for body in (b"[1,2,3]", b"[]", b'{"a":[1,{"b":null}]}', b'"x"', b"[" * 600, b"[1,", b"\xff"):
        yield _input(3, 0, body)
        yield _input(3, 1, body)
    yield _input(4, 0, b"\x01\x02\x03\x04" * 8)


if __name__ == "__main__":
    fuzz(test_one_input, seeds)
