"""The log's record format: what one append writes to a segment file (sans-IO).

A record is ``length:u32le crc:u32le body``, ``crc`` the CRC-32 of ``body``;
``body`` is ``flags:u8``, then the producer stamp when flag ``PRODUCER`` is set
(``id_length:u16le id epoch:u64le seq:u64le``), the ``Stream-Seq`` when flag
``STREAM_SEQ`` is set (``length:u16le bytes``), the owner's tag when flag ``TAG`` is
set (``tag:u64le``, a number the stream's owner attaches: the sessions put the cursor
of a run's first line there), then the payload: the append's bytes in wire format.
Flag ``CLOSE`` marks the append that closed the stream. So one write holds
the data and everything an append changes (producer state, seq, closure), and a crash
can tear only the last record: :func:`scan` stops at the first record that is
incomplete or fails its CRC, and recovery truncates the file there.

A position in the log is a byte offset across its segments; every record starts and
ends at one, and only record boundaries are ever handed out as offsets.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CLOSE",
    "HEADER",
    "PRODUCER",
    "STREAM_SEQ",
    "TAG",
    "ProducerStamp",
    "Record",
    "encode",
    "payloads",
    "scan",
]

PRODUCER: Final = 1
STREAM_SEQ: Final = 2
CLOSE: Final = 4
TAG: Final = 8
_KNOWN: Final = PRODUCER | STREAM_SEQ | CLOSE | TAG
_HEAD: Final = struct.Struct("<II")
_PRODUCER: Final = struct.Struct("<QQ")
_LENGTH16: Final = struct.Struct("<H")
_TAG: Final = struct.Struct("<Q")
HEADER: Final = _HEAD.size
"""The bytes before a record's body."""
MAX_FIELD: Final = 0xFFFF
"""The longest producer id or ``Stream-Seq`` a record holds (bytes)."""


@dataclass(frozen=True, slots=True)
class ProducerStamp:
    """The idempotent producer that wrote a record: ``(id, epoch, seq)``."""

    id: str
    epoch: int
    seq: int


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: where it starts and ends in the log, and what it says."""

    start: int
    end: int
    payload: bytes
    producer: ProducerStamp | None
    stream_seq: str | None
    close: bool
    tag: int | None = None


def encode(
    payload: bytes,
    *,
    producer: ProducerStamp | None = None,
    stream_seq: str | None = None,
    close: bool = False,
    tag: int | None = None,
) -> bytes:
    """The record of one append. Raises :class:`ValueError` for a producer id or seq
    longer than :data:`MAX_FIELD` bytes."""
    flags = (PRODUCER if producer else 0) | (STREAM_SEQ if stream_seq is not None else 0)
    flags |= (CLOSE if close else 0) | (TAG if tag is not None else 0)
    parts = [bytes((flags,))]
    if producer is not None:
        parts.append(_field(producer.id.encode()))
        parts.append(_PRODUCER.pack(producer.epoch, producer.seq))
    if stream_seq is not None:
        parts.append(_field(stream_seq.encode()))
    if tag is not None:
        parts.append(_TAG.pack(tag))
    prefix = b"".join(parts)
    crc = zlib.crc32(payload, zlib.crc32(prefix))
    return b"".join((_HEAD.pack(len(prefix) + len(payload), crc), prefix, payload))


def _field(value: bytes) -> bytes:
    if len(value) > MAX_FIELD:
        raise ValueError(f"a record field holds at most {MAX_FIELD} bytes")
    return _LENGTH16.pack(len(value)) + value


def scan(data: bytes | memoryview, base: int, *, verify: bool = True) -> Iterator[Record]:
    """The whole records at the start of ``data``, which begins at log position ``base``.

    Stops at the first record that is incomplete, or (with ``verify``) fails its CRC or
    has unknown flags; the last yielded record's ``end`` is where the valid log ends.
    """
    view = memoryview(data)
    pos = 0
    size = len(view)
    while pos + HEADER <= size:
        length, crc = _HEAD.unpack_from(view, pos)
        end = pos + HEADER + length
        if length < 1 or end > size:
            return
        body = view[pos + HEADER : end]
        if verify and zlib.crc32(body) != crc:
            return
        record = _decode(body, base + pos, base + end)
        if record is None:
            return
        yield record
        pos = end


def _decode(body: memoryview, start: int, end: int) -> Record | None:
    flags = body[0]
    if flags & ~_KNOWN:
        return None
    at = 1
    producer = None
    stream_seq = None
    tag = None
    try:
        if flags & PRODUCER:
            (n,) = _LENGTH16.unpack_from(body, at)
            producer_id = bytes(body[at + 2 : at + 2 + n]).decode()
            at += 2 + n
            epoch, seq = _PRODUCER.unpack_from(body, at)
            at += _PRODUCER.size
            producer = ProducerStamp(producer_id, epoch, seq)
        if flags & STREAM_SEQ:
            (n,) = _LENGTH16.unpack_from(body, at)
            stream_seq = bytes(body[at + 2 : at + 2 + n]).decode()
            at += 2 + n
        if flags & TAG:
            (tag,) = _TAG.unpack_from(body, at)
            at += _TAG.size
    except (struct.error, UnicodeDecodeError):
        return None
    if at > len(body):
        return None
    return Record(start, end, bytes(body[at:]), producer, stream_seq, bool(flags & CLOSE), tag)


def payloads(data: bytes | memoryview, base: int) -> tuple[bytes, int]:
    """The payloads of the whole records at the start of ``data`` (CRCs verified),
    joined, and the log position after the last of them."""
    end = base
    parts = []
    for record in scan(data, base):
        parts.append(record.payload)
        end = record.end
    return b"".join(parts), end
