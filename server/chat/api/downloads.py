"""Serving a blob's bytes as a file download (a bag file, a file of a chat's workspace):
a streaming body read in worker threads.

:class:`FileBody` streams a blob (:meth:`~..store.bag.BlobStore.read`, each read in
a worker thread) and closes its reader in ``__aexit__`` (also when the client leaves
mid-download).
Files are always served as downloads (``Content-Disposition: attachment``, ``nosniff``,
a sandboxing CSP): they are user content and must not run as a page of this origin.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from types import TracebackType
from urllib.parse import quote

import trio
from quart import Response
from quart.wrappers.response import ResponseBody

from sandstream.server.chat.model import BagFile, FileNotFoundInBagError
from sandstream.server.chat.store import BlobStore

__all__ = ["FileBody", "blob_download", "file_response"]


class FileBody(ResponseBody):
    """The bytes of one blob, streamed."""

    def __init__(self, chunks: AsyncGenerator[bytes, None]) -> None:
        self._chunks = chunks

    async def __aenter__(self) -> FileBody:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with trio.CancelScope(shield=True):
            await self._chunks.aclose()

    def __aiter__(self) -> FileBody:
        return self

    async def __anext__(self) -> bytes:
        return await anext(self._chunks)


def _disposition(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    ascii_name = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\' else "_" for ch in base)
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(base, safe='')}"


async def file_response(bag_file: BagFile, blobs: BlobStore) -> Response:
    """The download response for ``bag_file``, its bytes from ``blobs``. Raises
    FileNotFoundInBagError if its blob is missing."""
    if not await blobs.exists(bag_file.sha256):
        raise FileNotFoundInBagError(bag_file.id)
    return blob_download(
        blobs,
        sha256=bag_file.sha256,
        size=bag_file.size,
        name=bag_file.name,
        content_type=bag_file.content_type,
    )


def blob_download(
    blobs: BlobStore, *, sha256: str, size: int, name: str, content_type: str
) -> Response:
    """The download response for the stored blob ``sha256`` (``size`` bytes) as the
    file ``name`` (its last path component names the download), ETag its SHA-256."""
    body = FileBody(blobs.read(sha256))
    response = Response(body, status=200, content_type=content_type)
    response.headers["Content-Length"] = str(size)
    response.headers["Content-Disposition"] = _disposition(name)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response.headers["Cache-Control"] = "private, no-store"
    response.headers["ETag"] = f'"{sha256}"'
    response.timeout = None
    return response
