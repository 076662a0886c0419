"""JSON mode: ``application/json`` streams keep message boundaries (sans-IO).

An append's body is one JSON value, or an array whose elements are the messages (one
level flattened). Each message is stored compact, followed by ``,``: the wire format
the log keeps, so a read of any range of whole appends is ``[`` + its bytes without
the last comma + ``]``. Invalid JSON, or an empty array on append, raises
:class:`InvalidStreamRequestError`.
"""

from __future__ import annotations

from typing import Final

import msgspec

from .errors import InvalidStreamRequestError

__all__ = ["is_json", "json_body", "json_messages", "json_payload"]

_encode: Final = msgspec.json.Encoder().encode
_decode: Final = msgspec.json.Decoder().decode


def is_json(content_type: str) -> bool:
    """True for a JSON-mode stream's content type (``application/json``, any params)."""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def json_payload(body: bytes, *, allow_empty: bool) -> bytes:
    """The stored form of an append's body: its messages, each compact and followed by
    ``,``. ``allow_empty``: an empty array is no messages (a create), not an error."""
    try:
        value = _decode(body)
    except msgspec.DecodeError as error:
        raise InvalidStreamRequestError(f"the body is not valid JSON: {error}") from None
    messages = value if isinstance(value, list) else [value]
    if not messages and not allow_empty:
        raise InvalidStreamRequestError("an empty JSON array appends nothing")
    return b"".join(_encode(message) + b"," for message in messages)


def json_body(payload: bytes) -> bytes:
    """A read's body from stored JSON messages: the JSON array of them."""
    return b"[" + payload[:-1] + b"]" if payload else b"[]"


def json_messages(payload: bytes) -> list[bytes]:
    """The stored messages of ``payload``, each with its trailing comma."""
    if not payload:
        return []
    return [_encode(message) + b"," for message in _decode(json_body(payload))]
