"""The chat bag's bytes: a content-addressed blob store.

:class:`BlobStore` (the SQLite store's) keeps a file's bytes at
``<root>/blobs/<sha256[:2]>/<sha256>``; the database holds its metadata (name, size,
content type, owner). :class:`PostgresBlobStore` (the PostgreSQL store's) keeps them in
the database, a ``bag_blobs`` row per SHA-256, so that replicas share nothing but
the database. Either way files are written to ``<root>/tmp/`` first (an upload in
progress), then committed to their content address before their metadata is written
(flushed and renamed into place; or inserted in one transaction), so a blob is either
absent or complete, and identical contents are stored once. Blobs are never
rewritten; soft-deleting a chat hides its files' metadata and leaves the blobs (a
purge of unreferenced blobs is a separate, offline concern). The chats' workspace
snapshots keep their files' bytes here too, by the same addresses. Reads stream a
blob in pieces of :data:`READ_SIZE`, each read in a worker thread.

:func:`sanitize_name` (from :mod:`sandstream.core.names`, shared with the
container) makes a client's file name safe to store and to show.
"""

from __future__ import annotations

import contextlib
import mimetypes
import os
import re
import secrets
import stat
from collections.abc import AsyncGenerator, Collection
from pathlib import Path
from typing import Final

import trio

from sandstream.core import MAX_NAME_BYTES, sanitize_name

from .database import Connection, Database

__all__ = [
    "MAX_NAME_BYTES",
    "READ_SIZE",
    "BlobStore",
    "PostgresBlobStore",
    "content_type_for",
    "sanitize_name",
]

READ_SIZE: Final = 256 * 1024
"""The bytes of a blob one read returns."""
_LOOKUP_BATCH: Final = 1000
"""SHA-256s one query of :meth:`PostgresBlobStore.stored_sizes` looks up."""

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
        self._clear_tmp_sync()

    def _clear_tmp_sync(self) -> None:
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

    def commit_sync(self, temp: Path, sha256: str) -> None:
        """Flush ``temp`` to disk and move it to its content address (or drop it if
        that blob already exists)."""
        target = self.path(sha256)
        if target.exists():
            temp.unlink(missing_ok=True)
            return
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp, target)

    async def commit(self, temp: Path, sha256: str) -> None:
        """Store the file ``temp`` (whose SHA-256 is ``sha256``) as that blob, once,
        and remove ``temp``; in a worker thread."""
        await trio.to_thread.run_sync(self.commit_sync, temp, sha256)

    async def discard(self, temps: list[Path]) -> None:
        """Remove temp files (shielded: runs even when the caller is cancelled)."""

        def run() -> None:
            for temp in temps:
                with contextlib.suppress(OSError):
                    temp.unlink()

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(run)

    async def exists(self, sha256: str) -> bool:
        """Whether the blob is stored."""
        return await trio.to_thread.run_sync(self.path(sha256).is_file)

    async def stored_sizes(self, hashes: Collection[str]) -> dict[str, int]:
        """Those of the blobs ``hashes`` (SHA-256s) that are stored, with their sizes;
        in one worker thread. Raises :class:`ValueError` for a string that is not a
        SHA-256."""

        def run() -> dict[str, int]:
            sizes: dict[str, int] = {}
            for sha256 in set(hashes):
                try:
                    status = os.stat(self.path(sha256))
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(status.st_mode):
                    sizes[sha256] = status.st_size
            return sizes

        return await trio.to_thread.run_sync(run)

    async def read(self, sha256: str) -> AsyncGenerator[bytes, None]:
        """The blob's bytes, :data:`READ_SIZE` at a time (the file is closed when the
        iterator is closed or ends). Raises :class:`OSError` if it is not stored."""
        async with await trio.open_file(self.path(sha256), "rb") as file:
            while data := await file.read(READ_SIZE):
                yield data


class PostgresBlobStore(BlobStore):
    """Blobs as ``bag_blobs`` rows of the PostgreSQL chat database ``db``; ``root``
    holds only the uploads in progress (``<root>/tmp``)."""

    def __init__(self, root: Path, db: Database) -> None:
        super().__init__(root)
        self.db = db

    def ensure_dirs_sync(self) -> None:
        self._clear_tmp_sync()

    async def commit(self, temp: Path, sha256: str) -> None:
        self.path(sha256)  # a SHA-256, or ValueError

        def run(conn: Connection) -> None:
            stored = conn.execute("SELECT 1 FROM bag_blobs WHERE sha256 = ?", (sha256,))
            if stored.fetchone() is None:
                conn.execute(
                    "INSERT INTO bag_blobs (sha256, data) VALUES (?, ?) "
                    "ON CONFLICT (sha256) DO NOTHING",
                    (sha256, temp.read_bytes()),
                )

        await self.db.write(run)
        await self.discard([temp])

    async def exists(self, sha256: str) -> bool:
        def run(conn: Connection) -> bool:
            return (
                conn.execute("SELECT 1 FROM bag_blobs WHERE sha256 = ?", (sha256,)).fetchone()
                is not None
            )

        return await self.db.read(run)

    async def stored_sizes(self, hashes: Collection[str]) -> dict[str, int]:
        wanted = sorted(set(hashes))
        for sha256 in wanted:
            self.path(sha256)  # a SHA-256, or ValueError

        def run(conn: Connection) -> dict[str, int]:
            sizes: dict[str, int] = {}
            for start in range(0, len(wanted), _LOOKUP_BATCH):
                batch = wanted[start : start + _LOOKUP_BATCH]
                marks = ", ".join("?" * len(batch))
                rows = conn.execute(
                    f"SELECT sha256, octet_length(data) FROM bag_blobs WHERE sha256 IN ({marks})",
                    batch,
                )
                sizes.update((row[0], int(row[1])) for row in rows)
            return sizes

        return await self.db.read(run)

    async def read(self, sha256: str) -> AsyncGenerator[bytes, None]:
        offset = 0
        while True:

            def run(conn: Connection, start: int = offset + 1) -> bytes:
                row = conn.execute(
                    "SELECT substring(data FROM ? FOR ?) FROM bag_blobs WHERE sha256 = ?",
                    (start, READ_SIZE, sha256),
                ).fetchone()
                if row is None:
                    raise FileNotFoundError(f"no blob {sha256}")
                return bytes(row[0])

            data = await self.db.read(run)
            if not data:
                return
            yield data
            offset += len(data)
