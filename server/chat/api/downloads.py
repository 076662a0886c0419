"""Serving a bag file's bytes: a streaming body read in worker threads.

:class:`FileBody` opens the blob in ``__aenter__`` and closes it in ``__aexit__``
(also when the client leaves mid-download); each read runs in a worker thread.
Files are always served as downloads (``Content-Disposition: attachment``, ``nosniff``,
a sandboxing CSP): they are user content and must not run as a page of this origin.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any, Final
from urllib.parse import quote

import trio
from quart import Response
from quart.wrappers.response import ResponseBody

from ..errors import FileNotFoundInBagError
from ..records import BagFile

__all__ = ["FileBody", "file_response"]

_READ_SIZE: Final = 256 * 1024


class FileBody(ResponseBody):
    """The bytes of one file, streamed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: Any = None

    async def __aenter__(self) -> FileBody:
        self._file = await trio.open_file(self.path, "rb")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._file is not None:
            with trio.CancelScope(shield=True):
                await self._file.aclose()

    def __aiter__(self) -> FileBody:
        return self

    async def __anext__(self) -> bytes:
        data: bytes = await self._file.read(_READ_SIZE)
        if not data:
            raise StopAsyncIteration
        return data


def _disposition(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    ascii_name = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\' else "_" for ch in base)
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(base, safe='')}"


async def file_response(bag_file: BagFile, body: FileBody) -> Response:
    """The download response for ``bag_file``. Raises FileNotFoundInBagError if its
    blob is missing on disk."""
    if not await trio.to_thread.run_sync(body.path.is_file):
        raise FileNotFoundInBagError(bag_file.id)
    response = Response(body, status=200, content_type=bag_file.content_type)
    response.headers["Content-Length"] = str(bag_file.size)
    response.headers["Content-Disposition"] = _disposition(bag_file.name)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response.headers["Cache-Control"] = "private, no-store"
    response.headers["ETag"] = f'"{bag_file.sha256}"'
    response.timeout = None
    return response
