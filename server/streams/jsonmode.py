"""JSON mode: ``application/json`` streams keep message boundaries (sans-IO).

An append's body is one JSON value, or an array whose elements are the messages (one
level flattened). Each message is stored compact, followed by ``,``: the wire format
the log keeps, so a read of any range of whole appends is ``[`` + its bytes without
the last comma + ``]``. Invalid JSON (invalid UTF-8 and nesting too deep for the
decoder included), a message nested deeper than :data:`MAX_JSON_DEPTH`, or an empty
array on append, raises :class:`InvalidStreamRequestError`.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from sandstream.core import JSONInputError, decode_json

from .errors import InvalidStreamRequestError

__all__ = [
    "MAX_JSON_DEPTH",
    "is_json",
    "json_body",
    "json_depth",
    "json_messages",
    "json_payload",
]

MAX_JSON_DEPTH: Final = 512
"""The most arrays and objects a stored message nests (a scalar: 0). The decoder's
depth is the interpreter's recursion limit less the stack under it, which differs
between an append and a read; bounded here, a message read back inside the read's
array (one level more, :func:`json_messages`) decodes wherever it is read."""

_encode: Final = msgspec.json.Encoder().encode
_decode: Final = msgspec.json.Decoder().decode


def is_json(content_type: str) -> bool:
    """True for a JSON-mode stream's content type (``application/json``, any params)."""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def json_payload(body: bytes, *, allow_empty: bool) -> bytes:
    """The stored form of an append's body: its messages, each compact and followed by
    ``,``. ``allow_empty``: an empty array is no messages (a create), not an error."""
    try:
        value = decode_json(body)
    except JSONInputError as error:
        raise InvalidStreamRequestError(f"the body is not valid JSON: {error}") from None
    messages = value if isinstance(value, list) else [value]
    if not messages and not allow_empty:
        raise InvalidStreamRequestError("an empty JSON array appends nothing")
    if any(json_depth(message) > MAX_JSON_DEPTH for message in messages):
        raise InvalidStreamRequestError(
            f"a JSON message nests more than {MAX_JSON_DEPTH} arrays and objects"
        )
    return b"".join(_encode(message) + b"," for message in messages)


def json_depth(value: Any) -> int:
    """How many arrays and objects ``value`` nests (a scalar: 0), without recursion."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, list | dict):
            depth += 1
            deepest = max(deepest, depth)
            pending.extend(
                (child, depth) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def json_body(payload: bytes) -> bytes:
    """A read's body from stored JSON messages: the JSON array of them."""
    return b"[" + payload[:-1] + b"]" if payload else b"[]"


def json_messages(payload: bytes) -> list[bytes]:
    """The stored messages of ``payload``, each with its trailing comma."""
    if not payload:
        return []
    return [_encode(message) + b"," for message in _decode(json_body(payload))]
