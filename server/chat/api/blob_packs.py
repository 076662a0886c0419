"""Blob packs on the snapshot callbacks' wire: one received into the blob store
(:func:`receive_pack`), one sent from it (:func:`pack_response`).

A blob pack is zero or more blobs, each the header line ``"<sha256> <size>\\n"`` then
exactly ``size`` bytes, to the end of the body; the core's
:class:`~sandstream.core.BlobPackReader` reads it and checks each blob's SHA-256.
Receiving writes each blob to a temp file of the blob store as it arrives (in worker
threads) and commits it to its address at its end, so a blob is stored whole and
checked, or not at all.

Bad input: a malformed pack, a blob whose bytes do not hash to its header's SHA-256,
or a blob announced larger than the bound is a 422
(:class:`~sandstream.server.http.BadRequestError`); more blob bytes than the bound, or
a body longer than those and a header for each of
:data:`~sandstream.core.MAX_SNAPSHOT_HASHES` blobs, is a 413
(:class:`~sandstream.server.chat.model.SnapshotTooLargeError`), at once when
``Content-Length`` says so. Then, as when the client leaves or the request is
cancelled, the blob being received is discarded (its temp file removed); whole blobs
before it may stay stored (those the reader handed over before the refusal: checked
and content-addressed, they are harmless, and a retry need not send them again).
Sending: closing the response's body (the client left) closes the blob being read.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from quart import Response

from sandstream.core import (
    MAX_SNAPSHOT_HASHES,
    BlobData,
    BlobEvent,
    BlobPackError,
    BlobPackReader,
    BlobStart,
    blob_header,
)
from sandstream.server.chat.model import SnapshotTooLargeError
from sandstream.server.chat.store import BlobStore
from sandstream.server.http import BadRequestError, invalid

from .downloads import FileBody

__all__ = ["pack_limit", "pack_response", "receive_pack"]


def pack_limit(max_bytes: int) -> int:
    """The longest body a pack of at most ``max_bytes`` of blobs may be: those bytes and
    a header for each of up to :data:`~sandstream.core.MAX_SNAPSHOT_HASHES` blobs (0
    when ``max_bytes`` is: snapshots are off)."""
    if max_bytes == 0:
        return 0
    return max_bytes + MAX_SNAPSHOT_HASHES * len(blob_header("0" * 64, max_bytes))


async def receive_pack(
    body: AsyncIterable[bytes],
    blobs: BlobStore,
    *,
    max_bytes: int,
    content_length: int | None = None,
) -> list[str]:
    """Store every blob of the pack ``body``; return their SHA-256s, in order.

    ``max_bytes``: the blob bytes the pack may hold (``--snapshot-max-bytes``; 0: none).
    Raises :class:`BadRequestError` (422) and
    :class:`~sandstream.server.chat.model.SnapshotTooLargeError` (413) as the module
    docstring says. Cancellation: the blob being received is discarded, then
    :class:`trio.Cancelled` propagates.
    """
    limit = pack_limit(max_bytes)
    if content_length is not None and content_length > limit:
        raise _too_large(max_bytes)
    reader = BlobPackReader(max_bytes)
    writer = _PackWriter(blobs, max_bytes)
    received = 0
    try:
        async for chunk in body:
            received += len(chunk)
            if received > limit:
                raise _too_large(max_bytes)
            try:
                events = reader.feed(chunk)
            except BlobPackError as exc:
                raise _malformed(exc) from None
            for event in events:
                await writer.handle(event)
        try:
            reader.close()
        except BlobPackError as exc:
            raise _malformed(exc) from None
        return writer.stored
    finally:
        await writer.discard()


def _malformed(exc: BlobPackError) -> BadRequestError:
    return BadRequestError(invalid(f"the blob pack is malformed: {exc}"))


def _too_large(max_bytes: int) -> SnapshotTooLargeError:
    if max_bytes == 0:
        return SnapshotTooLargeError("workspace snapshots are off (--snapshot-max-bytes 0)")
    return SnapshotTooLargeError(f"the blob pack holds more than {max_bytes} bytes of blobs")


@dataclass(slots=True)
class _Blob:
    """The blob being received: its temp file."""

    temp: Path
    file: Any


@dataclass(slots=True)
class _PackWriter:
    """Writes the blob being received to a temp file and commits it at its end."""

    blobs: BlobStore
    max_bytes: int
    stored: list[str] = field(default_factory=list)
    announced: int = 0
    current: _Blob | None = None

    async def handle(self, event: BlobEvent) -> None:
        if isinstance(event, BlobStart):
            self.announced += event.size
            if self.announced > self.max_bytes:
                raise _too_large(self.max_bytes)
            temp = self.blobs.new_temp_path()
            self.current = _Blob(temp, await trio.open_file(temp, "wb"))
            return
        assert self.current is not None  # the reader starts every blob
        if isinstance(event, BlobData):
            await self.current.file.write(event.data)
        else:
            await self.current.file.aclose()
            await self.blobs.commit(self.current.temp, event.sha256)
            self.current = None
            self.stored.append(event.sha256)

    async def discard(self) -> None:
        """Close and remove the blob being received, if any (shielded)."""
        if self.current is None:
            return
        if not self.current.file.closed:
            with trio.CancelScope(shield=True):
                await self.current.file.aclose()
        await self.blobs.discard([self.current.temp])


def pack_response(blobs: BlobStore, sizes: Sequence[tuple[str, int]]) -> Response:
    """``200 application/octet-stream``: the pack of the blobs ``sizes`` names (their
    SHA-256 and size, in order), each read from ``blobs`` in pieces as it is sent."""
    length = sum(len(blob_header(sha256, size)) + size for sha256, size in sizes)
    response = Response(
        FileBody(_pack(blobs, sizes)), status=200, content_type="application/octet-stream"
    )
    response.headers["Content-Length"] = str(length)
    response.headers["Cache-Control"] = "no-store"
    response.timeout = None
    return response


async def _pack(blobs: BlobStore, sizes: Sequence[tuple[str, int]]) -> AsyncGenerator[bytes, None]:
    for sha256, size in sizes:
        yield blob_header(sha256, size)
        async with contextlib.aclosing(blobs.read(sha256)) as pieces:
            async for piece in pieces:
                yield piece
