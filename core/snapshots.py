"""Workspace snapshots: what a turn's sandbox leaves for the next turn of its chat.

A :class:`SnapshotManifest` lists a sandbox's saved trees — each a **root** by name
(``work``: the work dir; ``home``: the agent's home) — as entries: directories,
regular files (by SHA-256 of their bytes, which are stored once, by that hash) and
symbolic links whose target stays inside their root. The container makes one after a
turn and restores one before the next (the container's snapshots module); the chat
backend checks one before it stores it (:func:`check_manifest`), so both sides apply
exactly one rule.

Bad input: :func:`check_manifest` raises :class:`SnapshotManifestError` for any entry a
restore could not write inside its root as listed — an unknown root, an absolute path,
a ``.``/``..``/empty component, a NUL, a duplicate, a file or link whose parent is not
a listed directory, an absolute link target or one that climbs out of its root, a
malformed hash, a mode beyond the permission bits, a negative size. Nothing here does
I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from typing import Final, Literal

import msgspec

from .errors import SandstreamError

__all__ = [
    "SNAPSHOT_ROOTS",
    "EntryType",
    "SnapshotEntry",
    "SnapshotManifest",
    "SnapshotManifestError",
    "check_manifest",
    "manifest_digest",
]

SNAPSHOT_ROOTS: Final = ("work", "home")
"""The trees a sandbox's snapshot may hold: its work dir and the agent's home."""

EntryType = Literal["dir", "file", "symlink"]

_SHA256_RE: Final = re.compile(r"^[0-9a-f]{64}$")
_MAX_PATH_BYTES: Final = 4096
_MAX_COMPONENT_BYTES: Final = 255


class SnapshotManifestError(SandstreamError, ValueError):
    """A manifest that cannot be restored as listed (see the module docstring)."""


class SnapshotEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One saved path: ``path`` is ``root/relative/path`` (POSIX, ``/``-separated); a
    root itself is listed as its bare name, type ``dir``. ``mode``: the permission bits;
    a file's ``size`` and ``sha256``; a symlink's ``target`` (relative)."""

    path: str
    type: EntryType
    mode: int = 0o755
    size: int = 0
    sha256: str | None = None
    target: str | None = None


class SnapshotManifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A snapshot's entries, parents before their children."""

    entries: list[SnapshotEntry] = msgspec.field(default_factory=list)

    @property
    def files(self) -> list[SnapshotEntry]:
        """The regular files."""
        return [entry for entry in self.entries if entry.type == "file"]

    @property
    def total_bytes(self) -> int:
        """The bytes of its files, each counted as often as it is listed."""
        return sum(entry.size for entry in self.entries if entry.type == "file")

    def hashes(self) -> set[str]:
        """The distinct SHA-256s of its files."""
        return {entry.sha256 for entry in self.entries if entry.sha256 is not None}


def manifest_digest(manifest: SnapshotManifest) -> str:
    """The SHA-256 of ``manifest``'s canonical JSON (equal manifests, equal digests)."""
    return hashlib.sha256(msgspec.json.encode(manifest)).hexdigest()


def check_manifest(manifest: SnapshotManifest, roots: Collection[str] = SNAPSHOT_ROOTS) -> None:
    """Raise :class:`SnapshotManifestError` unless every entry of ``manifest`` can be
    restored inside its root (one of ``roots``) exactly as listed."""
    kinds: dict[str, EntryType] = {}
    for entry in manifest.entries:
        _check_entry(entry, roots, kinds)
        kinds[entry.path] = entry.type


def _check_entry(entry: SnapshotEntry, roots: Collection[str], kinds: dict[str, EntryType]) -> None:
    path = entry.path
    parts = _parts(path)
    if parts[0] not in roots:
        raise SnapshotManifestError(f"{path!r}: not under one of the roots {sorted(roots)}")
    if path in kinds:
        raise SnapshotManifestError(f"{path!r}: listed twice")
    if len(parts) == 1:
        if entry.type != "dir":
            raise SnapshotManifestError(f"{path!r}: a root must be a directory")
    elif kinds.get(path.rpartition("/")[0]) != "dir":  # _parts: no empty component
        raise SnapshotManifestError(f"{path!r}: its parent is not a directory listed before it")
    if not 0 <= entry.mode <= 0o777:
        raise SnapshotManifestError(f"{path!r}: mode {entry.mode:#o} is not permission bits")
    if entry.type == "file":
        if entry.sha256 is None or not _SHA256_RE.match(entry.sha256):
            raise SnapshotManifestError(f"{path!r}: a file needs a lowercase hex SHA-256")
        if entry.size < 0:
            raise SnapshotManifestError(f"{path!r}: negative size")
        if entry.target is not None:
            raise SnapshotManifestError(f"{path!r}: a file has no link target")
    elif entry.type == "symlink":
        _check_target(path, parts, entry.target)
        if entry.sha256 is not None or entry.size:
            raise SnapshotManifestError(f"{path!r}: a link has no content")
    elif entry.sha256 is not None or entry.size or entry.target is not None:
        raise SnapshotManifestError(f"{path!r}: a directory has no content")


def _parts(path: str) -> list[str]:
    if not path or "\x00" in path or path.startswith("/"):
        raise SnapshotManifestError(f"{path!r}: not a relative path")
    size = len(path) if path.isascii() else len(path.encode("utf-8", "surrogatepass"))
    if size > _MAX_PATH_BYTES:
        raise SnapshotManifestError(f"{path[:64]!r}…: longer than {_MAX_PATH_BYTES} bytes")
    parts = path.split("/")
    if "" in parts or "." in parts or ".." in parts:
        raise SnapshotManifestError(f"{path!r}: an empty, '.' or '..' component")
    if size > _MAX_COMPONENT_BYTES:  # else no component can be (a manifest has thousands)
        for part in parts:
            if len(part.encode("utf-8", "surrogatepass")) > _MAX_COMPONENT_BYTES:
                raise SnapshotManifestError(
                    f"{path!r}: a component over {_MAX_COMPONENT_BYTES} bytes"
                )
    return parts


def _check_target(path: str, parts: list[str], target: str | None) -> None:
    """A link's target must be relative and, read lexically from the link's directory,
    stay inside the link's root (it may name a path the snapshot does not list). A
    restore never follows a link, so no target can make it write elsewhere."""
    if not target or "\x00" in target or target.startswith("/"):
        raise SnapshotManifestError(f"{path!r}: a link's target must be a relative path")
    depth = len(parts) - 2  # directories between the root and the link
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise SnapshotManifestError(f"{path!r}: its target {target!r} leaves its root")
        elif part not in ("", "."):
            depth += 1
