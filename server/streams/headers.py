"""The protocol's request headers, parsed strictly (sans-IO).

Each parser takes the header's value (``None`` when absent) and returns what it says,
or raises :class:`InvalidStreamRequestError` naming the header: ``Stream-TTL`` is a
decimal integer without sign or leading zeros, ``Stream-Expires-At`` an RFC 3339 time
with a zone, producer headers come all three or none, epochs and seqs are integers up
to 2**53-1, and ``Stream-Closed`` is true only when it says ``true``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final

from .errors import InvalidStreamRequestError
from .records import MAX_FIELD, ProducerStamp

__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "closed_flag",
    "expires_at",
    "media_type",
    "producer_stamp",
    "stream_seq",
    "sub_offset",
    "ttl_seconds",
]

DEFAULT_CONTENT_TYPE: Final = "application/octet-stream"
_TTL: Final = re.compile(r"0|[1-9][0-9]{0,15}")
_INTEGER: Final = re.compile(r"[0-9]{1,16}")
_MAX_SAFE_INTEGER: Final = 2**53 - 1
_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


def media_type(content_type: str) -> str:
    """The media type of a ``Content-Type``, lowercased, without parameters: what two
    content types are compared by."""
    return content_type.split(";", 1)[0].strip().lower()


def closed_flag(value: str | None) -> bool:
    """``Stream-Closed``: true only for ``true`` (any case); anything else is absent."""
    return value is not None and value.strip().lower() == "true"


def ttl_seconds(value: str | None) -> int | None:
    """``Stream-TTL`` in seconds."""
    if value is None:
        return None
    if not _TTL.fullmatch(value.strip()):
        raise InvalidStreamRequestError(
            "Stream-TTL must be a non-negative decimal integer without sign or leading zeros"
        )
    return int(value)


def expires_at(value: str | None) -> float | None:
    """``Stream-Expires-At`` as Unix epoch seconds."""
    if value is None:
        return None
    text = value.strip()
    if not _RFC3339.fullmatch(text):
        raise InvalidStreamRequestError("Stream-Expires-At must be an RFC 3339 timestamp")
    try:
        return datetime.fromisoformat(text.replace("z", "Z")).timestamp()
    except ValueError:
        raise InvalidStreamRequestError("Stream-Expires-At is not a valid time") from None


def _safe_integer(name: str, value: str) -> int:
    text = value.strip()
    if not _INTEGER.fullmatch(text) or int(text) > _MAX_SAFE_INTEGER:
        raise InvalidStreamRequestError(f"{name} must be an integer from 0 to 2**53-1")
    return int(text)


def producer_stamp(
    producer_id: str | None, epoch: str | None, seq: str | None
) -> ProducerStamp | None:
    """``Producer-Id``, ``Producer-Epoch`` and ``Producer-Seq``: all three, or none."""
    if producer_id is None and epoch is None and seq is None:
        return None
    if producer_id is None or epoch is None or seq is None:
        raise InvalidStreamRequestError(
            "Producer-Id, Producer-Epoch and Producer-Seq come together or not at all"
        )
    if not producer_id or len(producer_id.encode()) > MAX_FIELD:
        raise InvalidStreamRequestError(f"Producer-Id must be 1 to {MAX_FIELD} bytes")
    return ProducerStamp(
        producer_id,
        _safe_integer("Producer-Epoch", epoch),
        _safe_integer("Producer-Seq", seq),
    )


def stream_seq(value: str | None) -> str | None:
    """``Stream-Seq``: an opaque string compared byte by byte."""
    if value is not None and len(value.encode()) > MAX_FIELD:
        raise InvalidStreamRequestError(f"Stream-Seq holds at most {MAX_FIELD} bytes")
    return value


def sub_offset(value: str | None) -> int:
    """``Stream-Fork-Sub-Offset``: a non-negative integer (absent: 0)."""
    if value is None:
        return 0
    if not _INTEGER.fullmatch(value.strip()):
        raise InvalidStreamRequestError("Stream-Fork-Sub-Offset must be a non-negative integer")
    return int(value)
