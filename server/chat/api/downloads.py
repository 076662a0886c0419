"""Serving a bag file's bytes: a streaming body read in worker threads.

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

__all__ = ["FileBody", "file_response"]


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
    body = FileBody(blobs.read(bag_file.sha256))
    response = Response(body, status=200, content_type=bag_file.content_type)
    response.headers["Content-Length"] = str(bag_file.size)
    response.headers["Content-Disposition"] = _disposition(bag_file.name)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response.headers["Cache-Control"] = "private, no-store"
    response.headers["ETag"] = f'"{bag_file.sha256}"'
    response.timeout = None
    return response
