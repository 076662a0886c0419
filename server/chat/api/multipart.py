"""Receive a ``multipart/form-data`` upload straight into the blob store.

:func:`receive_files` reads the request body chunk by chunk, decodes it with
:class:`~.multipart_reader.PartReader` (which takes a chunk of any size in bounded
slices), writes each file part to a temp file (in worker threads) while hashing it,
enforces the limits as the bytes arrive, and finally moves each file to its content
address. Non-file fields are ignored.

On any failure (malformed body, a limit exceeded, cancellation) the temp files are
removed and nothing is kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import trio
from werkzeug.http import parse_options_header
from werkzeug.sansio.multipart import Data, Field, File

from sandstream.server.chat.model import (
    NewBlob,
    UnsupportedMediaTypeError,
    UploadError,
    UploadTooLargeError,
)
from sandstream.server.chat.store import BlobStore, content_type_for, sanitize_name

from .multipart_reader import PartEvent, PartReader

__all__ = ["PART_OVERHEAD", "ReceivedFile", "UploadLimits", "receive_files"]

PART_OVERHEAD: Final = 4096
"""Bytes of multipart framing allowed per part on top of the file data."""


@dataclass(frozen=True, slots=True)
class UploadLimits:
    """``max_bytes``: file bytes in one request; ``max_files``: file parts in one request."""

    max_bytes: int
    max_files: int


@dataclass(slots=True)
class ReceivedFile:
    """A file part, stored: ``blob`` is what the bag records."""

    blob: NewBlob


@dataclass(slots=True)
class _Part:
    name: str
    content_type: str
    temp: Path
    file: Any
    hasher: Any
    size: int = 0


async def receive_files(
    body: AsyncIterable[bytes],
    content_type: str | None,
    *,
    blobs: BlobStore,
    limits: UploadLimits,
    content_length: int | None = None,
    keep_dirs: bool = False,
) -> list[ReceivedFile]:
    """Store every file part of the body; return them in order.

    ``keep_dirs`` keeps a relative path as the file's name (results), else only the
    base name is kept (user uploads). Raises :class:`UnsupportedMediaTypeError` for a
    body that is not multipart, :class:`UploadError` for a malformed one,
    :class:`UploadTooLargeError` past ``limits``: at once if ``content_length`` (the
    request's ``Content-Length``) says so, else as soon as the body crosses them.
    Cancellation: temp files are removed, then :class:`trio.Cancelled` propagates.
    """
    mimetype, options = parse_options_header(content_type or "")
    boundary = options.get("boundary", "")
    if mimetype != "multipart/form-data" or not boundary:
        raise UnsupportedMediaTypeError("the body must be multipart/form-data with a boundary")
    reader = PartReader(boundary.encode("latin-1"))
    raw_limit = limits.max_bytes + (limits.max_files + 1) * PART_OVERHEAD
    if content_length is not None and content_length > raw_limit:
        raise UploadTooLargeError(f"the upload exceeds {limits.max_bytes} bytes")
    raw = 0
    temps: list[Path] = []
    done: list[_Part] = []
    current: _Part | None = None
    file_bytes = 0
    try:
        async for chunk in body:
            raw += len(chunk)
            if raw > raw_limit:
                raise UploadTooLargeError(f"the upload exceeds {limits.max_bytes} bytes")
            current, file_bytes = await _handle(
                reader.feed(chunk), current, done, temps, blobs, limits, keep_dirs, file_bytes
            )
        current, file_bytes = await _handle(
            reader.close(), current, done, temps, blobs, limits, keep_dirs, file_bytes
        )
        if current is not None:
            raise UploadError("the multipart body ended inside a part")
        received = []
        for part in done:
            sha256 = part.hasher.hexdigest()
            await blobs.commit(part.temp, sha256)
            blob = NewBlob(
                name=part.name, size=part.size, content_type=part.content_type, sha256=sha256
            )
            received.append(ReceivedFile(blob=blob))
        return received
    finally:
        if current is not None:
            with trio.CancelScope(shield=True):
                await current.file.aclose()
        for part in done:
            if not part.file.closed:
                with trio.CancelScope(shield=True):
                    await part.file.aclose()
        await blobs.discard(temps)  # those committed were moved away already


async def _handle(
    events: Iterator[PartEvent],
    current: _Part | None,
    done: list[_Part],
    temps: list[Path],
    blobs: BlobStore,
    limits: UploadLimits,
    keep_dirs: bool,
    file_bytes: int,
) -> tuple[_Part | None, int]:
    """Handle ``events``; return the open part and the file byte count so far."""
    skipping = current is None
    for event in events:
        if isinstance(event, File):
            if len(done) + 1 > limits.max_files:
                raise UploadTooLargeError(f"more than {limits.max_files} files in one upload")
            name = sanitize_name(event.filename, keep_dirs=keep_dirs)
            temp = blobs.new_temp_path()
            temps.append(temp)
            handle = await trio.open_file(temp, "wb")
            current = _Part(
                name=name,
                content_type=content_type_for(name, event.headers.get("content-type")),
                temp=temp,
                file=handle,
                hasher=hashlib.sha256(),
            )
            skipping = False
        elif isinstance(event, Field):
            current = None
            skipping = True
        elif isinstance(event, Data):
            if not skipping and current is not None:
                if event.data:
                    file_bytes += len(event.data)
                    if file_bytes > limits.max_bytes:
                        raise UploadTooLargeError(f"the upload exceeds {limits.max_bytes} bytes")
                    current.hasher.update(event.data)
                    current.size += len(event.data)
                    await current.file.write(event.data)
                if not event.more_data:
                    await current.file.aclose()
                    done.append(current)
                    current = None
            if not event.more_data:
                skipping = True
    return current, file_bytes
