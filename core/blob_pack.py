"""The blob pack: file contents by SHA-256, one after another in one HTTP body.

A pack is zero or more blobs, each an ASCII header line ``<sha256> <size>\\n`` (64
lowercase hex digits, a space, the size in decimal without sign or leading zeros)
followed by exactly ``size`` bytes; the pack ends with the body. :func:`blob_header`
writes a header; :class:`BlobPackReader` reads a pack sans-IO: bytes go in with any
chunk boundaries, the same events come out, and it checks each blob's bytes against
its header's SHA-256, so whoever reads a pack gets that check from here.

Bad input raises :class:`BlobPackError`: a header line over
:data:`MAX_BLOB_HEADER_BYTES` or malformed, a blob over the reader's bound, bytes that
do not hash to their header, a body that ends inside a header or a blob; the reader
then refuses further input. It holds at most one header line between calls, never a
blob's bytes. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final, TypeAlias

import msgspec

from .errors import SandstreamError

__all__ = [
    "MAX_BLOB_HEADER_BYTES",
    "BlobData",
    "BlobEnd",
    "BlobEvent",
    "BlobPackError",
    "BlobPackReader",
    "BlobStart",
    "blob_header",
]

MAX_BLOB_HEADER_BYTES: Final = 100
"""The longest header line, without its newline."""

_HEADER_RE: Final = re.compile(rb"([0-9a-f]{64}) (0|[1-9][0-9]*)")
_SHA256_RE: Final = re.compile(r"[0-9a-f]{64}")


class BlobPackError(SandstreamError, ValueError):
    """A blob pack that is malformed, over a bound, or whose bytes do not match their
    SHA-256; or a reader used after :meth:`BlobPackReader.close` or an error."""


class BlobStart(msgspec.Struct, frozen=True, gc=False):
    """A blob's header: its bytes follow as :class:`BlobData` events."""

    sha256: str
    size: int


class BlobData(msgspec.Struct, frozen=True, gc=False):
    """A piece of the current blob's bytes (the fed chunk itself when it lies wholly
    inside the blob)."""

    data: bytes


class BlobEnd(msgspec.Struct, frozen=True, gc=False):
    """The current blob is complete and its bytes hash to ``sha256``."""

    sha256: str


BlobEvent: TypeAlias = BlobStart | BlobData | BlobEnd


def blob_header(sha256: str, size: int) -> bytes:
    """The header line (with its newline) of a blob of ``size`` bytes hashing to
    ``sha256``; :class:`BlobPackError` for a hash that is not 64 lowercase hex digits
    or a negative size."""
    if not _SHA256_RE.fullmatch(sha256):
        raise BlobPackError(f"{sha256!r} is not a lowercase hex SHA-256")
    if size < 0:
        raise BlobPackError(f"negative blob size {size}")
    return f"{sha256} {size}\n".encode("ascii")


class BlobPackReader:
    """Read a blob pack fed in chunks: :meth:`feed` each chunk, then :meth:`close` at
    the end of the body."""

    __slots__ = ("_digest", "_done", "_header", "_max", "_remaining", "_sha256")

    def __init__(self, max_blob_bytes: int) -> None:
        if max_blob_bytes < 0:
            raise ValueError(f"max_blob_bytes must not be negative, got {max_blob_bytes}")
        self._max = max_blob_bytes
        self._header = bytearray()
        self._sha256: str | None = None  # the blob being read, None between blobs
        self._remaining = 0
        self._digest = hashlib.sha256()
        self._done = False  # closed or failed

    def feed(self, data: bytes) -> list[BlobEvent]:
        """The events ``data`` completes, in order; :class:`BlobPackError` for bad
        input (the events of this chunk are then lost with the reader)."""
        self._check_usable()
        events: list[BlobEvent] = []
        position, end = 0, len(data)
        try:
            while position < end:
                if self._sha256 is None:
                    position = self._read_header(data, position, events)
                else:
                    position = self._read_blob(data, position, events)
        except BlobPackError:
            self._done = True
            raise
        return events

    def close(self) -> None:
        """End the body; :class:`BlobPackError` if it ended inside a header or a blob."""
        self._check_usable()
        self._done = True
        if self._sha256 is not None:
            raise BlobPackError(
                f"the pack ended {self._remaining} bytes short of blob {self._sha256}"
            )
        if self._header:
            raise BlobPackError("the pack ended inside a header line")

    def _check_usable(self) -> None:
        if self._done:
            raise BlobPackError("the blob pack reader is closed or failed")

    def _read_header(self, data: bytes, position: int, events: list[BlobEvent]) -> int:
        room = MAX_BLOB_HEADER_BYTES - len(self._header)
        newline = data.find(b"\n", position, position + room + 1)
        if newline < 0:
            if len(data) - position > room:
                raise BlobPackError(f"a header line over {MAX_BLOB_HEADER_BYTES} bytes")
            self._header += data[position:]
            return len(data)
        line = data[position:newline]
        if self._header:
            line = bytes(self._header + line)
            self._header.clear()
        self._start(line, events)
        return newline + 1

    def _start(self, line: bytes, events: list[BlobEvent]) -> None:
        match = _HEADER_RE.fullmatch(line)
        if match is None:
            raise BlobPackError(f"malformed blob header {line!r}")
        sha256, size = match[1].decode("ascii"), int(match[2])
        if size > self._max:
            raise BlobPackError(f"blob {sha256} of {size} bytes is over {self._max}")
        events.append(BlobStart(sha256, size))
        self._sha256, self._remaining = sha256, size
        self._digest = hashlib.sha256()
        if not size:
            self._end(events)

    def _read_blob(self, data: bytes, position: int, events: list[BlobEvent]) -> int:
        take = min(self._remaining, len(data) - position)
        piece = data if take == len(data) else data[position : position + take]
        self._digest.update(piece)
        events.append(BlobData(piece))
        self._remaining -= take
        if not self._remaining:
            self._end(events)
        return position + take

    def _end(self, events: list[BlobEvent]) -> None:
        sha256 = self._sha256
        assert sha256 is not None
        if self._digest.hexdigest() != sha256:
            raise BlobPackError(f"the bytes of blob {sha256} do not hash to it")
        events.append(BlobEnd(sha256))
        self._sha256 = None
