"""Restoring a workspace snapshot: a manifest and its blob pack written into empty roots.

:func:`restore_snapshot` checks the manifest (:func:`~sandstream.core.check_manifest`),
then writes every entry into a staging folder per root — beside a root that does not
exist, inside one that is an empty folder (so that its entries move on one file
system) — reading the pack with :class:`~sandstream.core.BlobPackReader`, which checks
each blob's SHA-256. Files are created exclusively and never through a link; each
listed file is a file of its own; links are made last, then folder modes, deepest
first. Only when all is staged do the staged entries move into the roots. Disk work
runs in worker threads, a piece of the pack at a time; no blob is held in memory.

Bad input (a manifest :func:`~sandstream.core.check_manifest` refuses, a root that is
not an empty folder, a pack with a blob too many, missing, repeated, over the bound or
not matching its hash, a body cut short) and any failure, the pack's own included,
raise :class:`~.errors.SnapshotRestoreError`. On that and on cancellation (which
propagates) the staging folders are removed and the roots left as they were. The
roots must not be written to during a restore.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterable, Callable, Mapping
from pathlib import Path
from typing import Final

import trio

from sandstream.core import (
    BlobData,
    BlobEvent,
    BlobPackError,
    BlobPackReader,
    BlobStart,
    SandstreamError,
    SnapshotEntry,
    SnapshotManifest,
    SnapshotManifestError,
    check_manifest,
)

from .errors import SnapshotRestoreError

__all__ = ["restore_snapshot"]

_COPY_BYTES: Final = 1 << 20
"""The bytes copied at a time from a restored file to another with the same hash."""

_CREATE_FLAGS: Final = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
"""A new file, never through a link; with O_RDWR (the first file of a blob, copied
from) or O_WRONLY."""


async def restore_snapshot(
    manifest: SnapshotManifest,
    roots: Mapping[str, Path],
    pack: AsyncIterable[bytes],
    *,
    max_blob_bytes: int,
) -> int:
    """Restore ``manifest`` into ``roots`` (name to folder) from ``pack``, the blob
    pack of its files' distinct hashes (each once, in any order, blobs of at most
    ``max_blob_bytes``); return how many files were restored."""
    try:
        check_manifest(manifest, roots.keys())
    except SnapshotManifestError as exc:
        raise SnapshotRestoreError(f"the snapshot's manifest was refused: {exc}") from exc
    restore = _Restore(manifest, roots, max_blob_bytes)
    try:
        await trio.to_thread.run_sync(restore.stage_folders)
        async for chunk in pack:
            await trio.to_thread.run_sync(restore.feed, chunk)
        await trio.to_thread.run_sync(restore.finish)
    except BaseException as exc:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(restore.discard)
        if isinstance(exc, SnapshotRestoreError) or not isinstance(exc, Exception):
            raise
        reason = str(exc) if isinstance(exc, OSError | SandstreamError) else repr(exc)
        raise SnapshotRestoreError(f"the snapshot could not be restored: {reason}") from exc
    return len(manifest.files)


class _Restore:
    """One restore's state; every method but the constructor runs in a worker thread."""

    def __init__(
        self, manifest: SnapshotManifest, roots: Mapping[str, Path], max_blob_bytes: int
    ) -> None:
        self._entries = manifest.entries
        self._roots = {
            entry.path: roots[entry.path] for entry in self._entries if "/" not in entry.path
        }
        self._by_hash: dict[str, list[SnapshotEntry]] = {}
        for entry in manifest.files:
            assert entry.sha256 is not None  # check_manifest: every file has one
            same = self._by_hash.setdefault(entry.sha256, [])
            if same and same[0].size != entry.size:
                raise SnapshotRestoreError(f"{entry.path}: its hash is listed with two sizes")
            same.append(entry)
        self._reader = BlobPackReader(max_blob_bytes)
        self._staging: dict[str, Path] = {}  # root name: the folder its entries go to
        self._inside: set[str] = set()  # the roots staged inside themselves
        self._seen: set[str] = set()
        self._blob: list[SnapshotEntry] = []  # the entries of the blob being written
        self._fd: int | None = None  # the first of them, open
        self._undo: list[Callable[[], object]] = []  # what moved into the roots, to undo

    def stage_folders(self) -> None:
        """Refuse a root that is not absent or an empty folder; then make the staging
        folders and the listed folders in them."""
        for name, root in self._roots.items():
            try:
                status = os.lstat(root)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(status.st_mode):
                raise SnapshotRestoreError(f"the {name} root {root} is not a folder")
            if os.listdir(root):
                raise SnapshotRestoreError(f"the {name} root {root} is not empty")
        for name, root in self._roots.items():
            if os.path.lexists(root):
                self._inside.add(name)
            where = root if name in self._inside else root.parent
            self._staging[name] = Path(tempfile.mkdtemp(prefix=".restore-", dir=where))
        for entry in self._entries:
            if entry.type == "dir" and "/" in entry.path:
                os.mkdir(self._disk(entry.path), 0o700)

    def feed(self, chunk: bytes) -> None:
        """Write what ``chunk`` of the pack completes."""
        try:
            events = self._reader.feed(chunk)
        except BlobPackError as exc:
            raise SnapshotRestoreError(f"the blob pack was refused: {exc}") from exc
        for event in events:
            self._on(event)

    def finish(self) -> None:
        """After the pack's last chunk: check no blob is missing, make the links, set
        the folders' modes, and move the staged entries into the roots."""
        try:
            self._reader.close()
        except BlobPackError as exc:
            raise SnapshotRestoreError(f"the blob pack was refused: {exc}") from exc
        missing = self._by_hash.keys() - self._seen
        if missing:
            raise SnapshotRestoreError(f"the blob pack lacks {len(missing)} of the files")
        for entry in self._entries:
            if entry.type == "symlink":
                assert entry.target is not None  # check_manifest: every link has one
                os.symlink(entry.target, self._disk(entry.path))
        for entry in reversed(self._entries):  # children before their folders
            parent = entry.path.rpartition("/")[0]
            if entry.type == "dir" and parent and parent not in self._inside:
                os.chmod(self._disk(entry.path), entry.mode)
        for name in self._roots:
            self._place(name)

    def discard(self) -> None:
        """Undo what moved into the roots and remove the staging folders."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for undo in reversed(self._undo):
            with contextlib.suppress(OSError):
                undo()
        for staging in self._staging.values():
            with contextlib.suppress(OSError):
                _remove_tree(staging)

    def _disk(self, path: str) -> str:
        """Where ``path`` is staged (a string: building a :class:`Path` per entry costs
        more than the file's write)."""
        name, _, inside = path.partition("/")
        return f"{self._staging[name]}/{inside}"

    def _on(self, event: BlobEvent) -> None:
        if isinstance(event, BlobStart):
            self._start(event)
        elif isinstance(event, BlobData):
            assert self._fd is not None
            _write_all(self._fd, event.data)
        else:
            self._end()

    def _start(self, start: BlobStart) -> None:
        entries = self._by_hash.get(start.sha256)
        if entries is None:
            raise SnapshotRestoreError(f"the blob pack holds {start.sha256}, not a listed file")
        if start.sha256 in self._seen:
            raise SnapshotRestoreError(f"the blob pack holds {start.sha256} twice")
        if start.size != entries[0].size:
            raise SnapshotRestoreError(
                f"{entries[0].path}: {entries[0].size} bytes listed, {start.size} in the pack"
            )
        self._seen.add(start.sha256)
        self._blob = entries
        self._fd = os.open(self._disk(entries[0].path), os.O_RDWR | _CREATE_FLAGS, 0o600)

    def _end(self) -> None:
        """The blob is verified: set its file's mode, copy it to the other files that
        share its hash."""
        fd = self._fd
        assert fd is not None
        first, *others = self._blob
        os.fchmod(fd, first.mode)
        for entry in others:
            copy = os.open(self._disk(entry.path), os.O_WRONLY | _CREATE_FLAGS, 0o600)
            try:
                _copy(fd, copy, first.size)
                os.fchmod(copy, entry.mode)
            finally:
                os.close(copy)
        self._fd = None
        os.close(fd)

    def _place(self, name: str) -> None:
        """Move root ``name``'s staging folder onto it, or the entries staged inside it
        out into it (setting the modes of those that are folders only then: a folder
        that cannot be written to cannot move to another) and remove the staging folder;
        then set the root's mode. Each step is remembered, to be undone."""
        root, staging = self._roots[name], self._staging[name]
        if name in self._inside:
            for entry in self._entries:
                if entry.path.rpartition("/")[0] == name:
                    moved = root / entry.path.partition("/")[2]
                    self._move(self._disk(entry.path), moved)
                    if entry.type == "dir":
                        self._chmod(moved, entry.mode)
            staging.rmdir()
            self._undo.append(functools.partial(os.mkdir, staging, 0o700))
        else:
            self._move(staging, root)
        self._chmod(root, next(entry.mode for entry in self._entries if entry.path == name))

    def _move(self, source: str | Path, target: Path) -> None:
        os.rename(source, target)
        self._undo.append(functools.partial(os.rename, target, source))

    def _chmod(self, folder: Path, mode: int) -> None:
        before = stat.S_IMODE(os.lstat(folder).st_mode)
        os.chmod(folder, mode)
        self._undo.append(functools.partial(os.chmod, folder, before))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _copy(source: int, target: int, size: int) -> None:
    """Copy the first ``size`` bytes of ``source`` to ``target`` (both open files)."""
    offset = 0
    while offset < size:
        trio.from_thread.check_cancelled()
        piece = os.pread(source, min(_COPY_BYTES, size - offset), offset)
        if not piece:
            raise SnapshotRestoreError("a restored file shrank while it was copied")
        _write_all(target, piece)
        offset += len(piece)


def _remove_tree(top: Path) -> None:
    """Remove ``top`` and all under it, making its folders writable first (a restored
    folder may be read-only); links are removed, never followed."""
    if not top.exists():
        return
    folders = [top]
    while folders:
        folder = folders.pop()
        os.chmod(folder, 0o700)
        with os.scandir(folder) as listing:
            folders.extend(
                Path(child.path) for child in listing if child.is_dir(follow_symlinks=False)
            )
    shutil.rmtree(top)
