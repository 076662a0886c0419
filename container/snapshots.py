"""Workspace snapshots on disk: take one after a turn, read its files for an upload.

:func:`take_snapshot` walks each root (``work``, ``home``) without following a link and
lists it as a :class:`~sandstream.core.SnapshotManifest`: folders, regular files by
SHA-256, and links whose relative target stays in their root; special files and other
links are left out and named in :attr:`TakenSnapshot.skipped`, and so is a name that
is not UTF-8. An entry that vanishes during the walk is left out. :func:`pack_blobs`
reads files of a taken snapshot as a blob pack (:mod:`sandstream.core.blob_pack`) for
an upload body. The restore is :mod:`~sandstream.container.snapshot_restore`'s; the
caller does the HTTP. Disk work runs in worker threads.

Bad input: files over the byte bound raise :class:`~.errors.SnapshotTooLargeError`, a
file or folder that cannot be read :class:`~.errors.SnapshotError`, a file that
changes while it is read :class:`~.errors.SnapshotChangedError`; nothing on disk is
changed. Cancellation stops the walk between folders and pieces of a file, and
propagates.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar, TypeVarTuple

import trio

from sandstream.core import (
    SnapshotEntry,
    SnapshotManifest,
    SnapshotManifestError,
    blob_header,
    check_manifest,
)

from .errors import SnapshotChangedError, SnapshotError, SnapshotTooLargeError

__all__ = ["PIECE_BYTES", "TakenSnapshot", "pack_blobs", "take_snapshot"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

PIECE_BYTES: Final = 256 * 1024
"""The bytes read from a file at a time, to hash it or to pack it."""

_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""Never a link; never wait on a special file swapped in for a regular one."""


@dataclass(frozen=True)
class TakenSnapshot:
    """A snapshot's manifest, a file on disk for each of its distinct SHA-256s (to
    read for an upload), and the paths left out of it (special files, links that
    leave their root or are absolute, names that are not UTF-8), for a warning."""

    manifest: SnapshotManifest
    paths: dict[str, Path]
    skipped: list[str]


@dataclass(frozen=True)
class _Found:
    """An entry of the walk, before its file (if it is one) is hashed."""

    path: str
    disk: Path
    status: os.stat_result
    target: str | None = None


async def take_snapshot(roots: Mapping[str, Path], *, max_bytes: int) -> TakenSnapshot:
    """Snapshot each of ``roots`` (name to folder; one that does not exist is left
    out), its files holding at most ``max_bytes`` in all."""
    return await trio.to_thread.run_sync(_take, dict(roots), max_bytes)


async def pack_blobs(taken: TakenSnapshot, hashes: Iterable[str]) -> AsyncIterator[bytes]:
    """The blob pack of ``hashes`` (each once, in their order), read from ``taken``'s
    files: small files many at a time, a large one in pieces (each read in a worker
    thread); :class:`~.errors.SnapshotError` for a hash it does not hold,
    :class:`~.errors.SnapshotChangedError` for a file whose bytes changed since."""
    sizes = {entry.sha256: entry.size for entry in taken.manifest.files}
    wanted = list(dict.fromkeys(hashes))
    unknown = [sha256 for sha256 in wanted if sha256 not in taken.paths]
    if unknown:
        raise SnapshotError(f"{len(unknown)} blob(s) asked for are not in the snapshot")
    batch: list[tuple[str, Path, int]] = []
    batched = 0
    for sha256 in wanted:
        path, size = taken.paths[sha256], sizes[sha256]
        if size < PIECE_BYTES:
            batch.append((sha256, path, size))
            batched += size
            if batched < PIECE_BYTES:
                continue
        if batch:
            yield await trio.to_thread.run_sync(_read_small, batch)
            batch, batched = [], 0
        if size >= PIECE_BYTES:
            async for piece in _read_large(sha256, path, size):
                yield piece
    if batch:
        yield await trio.to_thread.run_sync(_read_small, batch)


def _read_small(batch: list[tuple[str, Path, int]]) -> bytes:
    """The pack entries (header and bytes) of the small files of ``batch``, each read
    whole and checked."""
    out = bytearray()
    for sha256, path, size in batch:
        try:
            fd = os.open(path, _READ_FLAGS)
            try:
                data = os.read(fd, size + 1)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _gone(path, exc) from exc
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
            raise SnapshotChangedError(f"{path} changed since it was hashed")
        out += blob_header(sha256, size)
        out += data
    return bytes(out)


async def _read_large(sha256: str, path: Path, size: int) -> AsyncIterator[bytes]:
    """The pack entry of one large file: its header, then its bytes piece by piece,
    checked at the end."""
    fd = await _reread(path, os.open, path, _READ_FLAGS)
    try:
        yield blob_header(sha256, size)
        digest = hashlib.sha256()
        left = size
        while left:
            piece = await _reread(path, os.read, fd, min(PIECE_BYTES, left))
            if not piece:
                raise SnapshotChangedError(f"{path} is shorter than when it was hashed")
            digest.update(piece)
            left -= len(piece)
            yield piece
        longer = await _reread(path, os.read, fd, 1)
    finally:
        os.close(fd)
    if longer or digest.hexdigest() != sha256:
        raise SnapshotChangedError(f"{path} changed since it was hashed")


async def _reread(path: Path, call: Callable[[*Ts], T], *args: *Ts) -> T:
    """``call(*args)`` in a worker thread, reading ``path`` again for an upload."""
    try:
        return await trio.to_thread.run_sync(call, *args)
    except OSError as exc:
        raise _gone(path, exc) from exc


def _gone(path: Path, exc: OSError) -> SnapshotChangedError:
    return SnapshotChangedError(f"{path} can no longer be read: {exc.strerror}")


def _take(roots: dict[str, Path], max_bytes: int) -> TakenSnapshot:
    found: list[_Found] = []
    skipped: list[str] = []
    for name in sorted(roots):
        _walk(name, roots[name], found, skipped)
    listed = sum(item.status.st_size for item in found if stat.S_ISREG(item.status.st_mode))
    if listed > max_bytes:
        raise SnapshotTooLargeError(f"{listed} bytes of files, over the {max_bytes} allowed")
    entries: list[SnapshotEntry] = []
    paths: dict[str, Path] = {}
    budget = max_bytes
    for item in found:
        entry = _entry(item, budget)
        if entry is None:
            continue
        budget -= entry.size
        if entry.sha256 is not None:
            paths.setdefault(entry.sha256, item.disk)
        entries.append(entry)
    manifest = SnapshotManifest(entries)
    try:
        check_manifest(manifest)
    except SnapshotManifestError as exc:
        raise SnapshotError(f"the snapshot cannot be restored as taken: {exc}") from exc
    return TakenSnapshot(manifest, paths, skipped)


def _walk(name: str, root: Path, found: list[_Found], skipped: list[str]) -> None:
    """Append ``root``'s entries to ``found``, each folder before what it holds, the
    entries of a folder by name."""
    try:
        status = os.lstat(root)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SnapshotError(f"cannot read the {name} folder: {exc.strerror}") from exc
    if not stat.S_ISDIR(status.st_mode):
        raise SnapshotError(f"the {name} root {root} is not a folder")
    stack = [_Found(name, root, status)]
    while stack:
        item = stack.pop()
        found.append(item)
        if stat.S_ISDIR(item.status.st_mode):
            stack.extend(reversed(_children(item, skipped)))


def _children(folder: _Found, skipped: list[str]) -> list[_Found]:
    trio.from_thread.check_cancelled()
    children: list[_Found] = []
    try:
        with os.scandir(folder.disk) as listing:
            named = sorted(listing, key=lambda child: child.name)
    except FileNotFoundError:
        return children
    except OSError as exc:
        raise SnapshotError(f"cannot read the folder {folder.path}: {exc.strerror}") from exc
    for child in named:
        path = f"{folder.path}/{child.name}"
        try:
            status = child.stat(follow_symlinks=False)
            target = os.readlink(child.path) if stat.S_ISLNK(status.st_mode) else None
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise SnapshotError(f"cannot read {path}: {exc.strerror}") from exc
        item = _Found(path, Path(child.path), status, target)
        if _kept(item):
            children.append(item)
        else:
            skipped.append(_shown(path))
    return children


def _kept(item: _Found) -> bool:
    """A folder or regular file with a UTF-8 name, or a link whose target is too and
    stays inside its root."""
    mode = item.status.st_mode
    if not _is_utf8(item.path):
        return False
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return True
    if not stat.S_ISLNK(mode) or item.target is None or not _is_utf8(item.target):
        return False
    parts = item.path.split("/")
    folders = [SnapshotEntry("/".join(parts[:depth]), "dir") for depth in range(1, len(parts))]
    link = SnapshotEntry(item.path, "symlink", mode=0o777, target=item.target)
    try:
        check_manifest(SnapshotManifest([*folders, link]), roots=(parts[0],))
    except SnapshotManifestError:
        return False
    return True


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(path: str) -> str:
    """``path`` fit to show, a byte that is not UTF-8 as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _entry(item: _Found, budget: int) -> SnapshotEntry | None:
    """The manifest entry of ``item``, hashing a file (``None`` if it has vanished)."""
    mode = item.status.st_mode
    if stat.S_ISDIR(mode):
        return SnapshotEntry(item.path, "dir", mode=mode & 0o777)
    if stat.S_ISLNK(mode):
        return SnapshotEntry(item.path, "symlink", mode=mode & 0o777, target=item.target)
    try:
        fd = os.open(item.disk, _READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SnapshotError(f"cannot read {item.path}: {exc.strerror}") from exc
    with open(fd, "rb", buffering=0) as file:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (item.status.st_dev, item.status.st_ino):
            raise SnapshotChangedError(f"{item.path} was replaced while the snapshot was taken")
        sha256, size = _hash(file, item.path, budget)
    return SnapshotEntry(item.path, "file", mode=opened.st_mode & 0o777, size=size, sha256=sha256)


def _hash(file: io.FileIO, path: str, budget: int) -> tuple[str, int]:
    """The SHA-256 and size of what ``file`` holds, at most ``budget`` bytes."""
    digest = hashlib.sha256()
    buffer = bytearray(PIECE_BYTES)
    view = memoryview(buffer)
    size = 0
    while count := file.readinto(buffer):
        size += count
        if size > budget:
            raise SnapshotTooLargeError(f"{path} grew past the snapshot's limit as it was read")
        digest.update(view[:count])
        trio.from_thread.check_cancelled()
    return digest.hexdigest(), size
