"""The chat bag's bytes: a content-addressed blob store under the data dir.

A file's bytes live at ``<root>/blobs/<sha256[:2]>/<sha256>``; the database holds
its metadata (name, size, content type, owner). Files are written to
``<root>/tmp/`` first, flushed to disk, then renamed into place, so a blob is either
absent or complete, and identical contents are stored once. Blobs are never
rewritten; soft-deleting a chat hides its files' metadata and leaves the blobs (a
purge of unreferenced blobs is a separate, offline concern).

:func:`sanitize_name` (from :mod:`sandstream.core.names`, shared with the
container) makes a client's file name safe to store and to show.
"""

from __future__ import annotations

import contextlib
import mimetypes
import os
import re
import secrets
from pathlib import Path
from typing import Final

import trio

from sandstream.core.names import MAX_NAME_BYTES, sanitize_name

__all__ = [
    "MAX_NAME_BYTES",
    "BlobStore",
    "content_type_for",
    "sanitize_name",
]

_SHA256_RE: Final = re.compile(r"^[0-9a-f]{64}$")
_CONTENT_TYPE_RE: Final = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
)


def content_type_for(name: str, declared: str | None) -> str:
    """The declared content type if well-formed (parameters dropped), else a guess."""
    if declared:
        base = declared.split(";", 1)[0].strip().lower()
        if _CONTENT_TYPE_RE.match(base):
            return base
    guessed = mimetypes.guess_type(name)[0]
    return guessed or "application/octet-stream"


class BlobStore:
    """Content-addressed files under ``root``. Blocking methods are marked ``_sync``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs"
        self.tmp = root / "tmp"

    def ensure_dirs_sync(self) -> None:
        """Create the folders; remove temp files left by a process that died."""
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        for leftover in self.tmp.iterdir():
            with contextlib.suppress(OSError):
                leftover.unlink()

    def path(self, sha256: str) -> Path:
        """Where the blob with this SHA-256 (lowercase hex) lives."""
        if not _SHA256_RE.match(sha256):
            raise ValueError(f"not a SHA-256: {sha256!r}")
        return self.blobs / sha256[:2] / sha256

    def new_temp_path(self) -> Path:
        """A fresh path in the temp folder (not created)."""
        return self.tmp / f"upload-{secrets.token_hex(12)}"

    def commit_sync(self, temp: Path, sha256: str) -> Path:
        """Flush ``temp`` to disk and move it to its content address (or drop it if
        that blob already exists). Returns the blob's path."""
        target = self.path(sha256)
        if target.exists():
            temp.unlink(missing_ok=True)
            return target
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp, target)
        return target

    async def commit(self, temp: Path, sha256: str) -> Path:
        """:meth:`commit_sync` in a worker thread."""
        return await trio.to_thread.run_sync(self.commit_sync, temp, sha256)

    async def discard(self, temps: list[Path]) -> None:
        """Remove temp files (shielded: runs even when the caller is cancelled)."""

        def run() -> None:
            for temp in temps:
                with contextlib.suppress(OSError):
                    temp.unlink()

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(run)

    def exists_sync(self, sha256: str) -> bool:
        return self.path(sha256).is_file()
