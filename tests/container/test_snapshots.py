"""Workspace snapshots on real folders: taken, packed, restored into fresh roots.

A restored tree equals the one taken (types, modes, bytes, link targets), whatever
the pieces its pack arrives in; what a snapshot cannot hold is skipped and named; a
restore refuses a bad manifest, a bad pack or a root in use, and then leaves the roots
and their parent folders as they were, also when it fails while moving into place or
is cancelled.
"""

from __future__ import annotations

import hashlib
import os
import random
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandstream.container.errors import (
    SnapshotChangedError,
    SnapshotError,
    SnapshotRestoreError,
    SnapshotTooLargeError,
)
from sandstream.container.snapshot_restore import restore_snapshot
from sandstream.container.snapshots import TakenSnapshot, pack_blobs, take_snapshot
from sandstream.core import SnapshotEntry, SnapshotManifest, blob_header

MAX_BLOB = 1 << 20

Tree = dict[str, tuple[str, int, bytes | str]]
"""A walk of a folder: relative path (``.`` for the folder) to (type, mode, bytes or
link target); a link's mode is left out (0)."""


def walk(top: Path) -> Tree:
    tree = {".": describe(top)}
    for folder, dirs, files in os.walk(top):  # lists links to folders, never enters them
        for name in [*dirs, *files]:
            path = Path(folder, name)
            tree[path.relative_to(top).as_posix()] = describe(path)
    return tree


def describe(path: Path) -> tuple[str, int, bytes | str]:
    status = os.lstat(path)
    if stat.S_ISLNK(status.st_mode):
        return ("link", 0, os.readlink(path))
    if stat.S_ISDIR(status.st_mode):
        return ("dir", stat.S_IMODE(status.st_mode), b"")
    return ("file", stat.S_IMODE(status.st_mode), path.read_bytes())


def write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.write_bytes(data)
    path.chmod(mode)


def realistic_tree(work: Path, home: Path) -> None:
    work.mkdir()
    work.chmod(0o750)
    (work / "src" / "pkg").mkdir(parents=True)
    write(work / "src" / "pkg" / "a.py", b"print('a')\n")
    write(work / "src" / "pkg" / "same.py", b"print('a')\n", 0o600)  # a.py's bytes
    write(work / "src" / "empty", b"")
    write(work / "src" / "also-empty", b"", 0o400)
    write(work / "run.sh", b"#!/bin/sh\necho hi\n", 0o755)
    write(work / "big.bin", bytes(range(256)) * 3000)  # several pieces
    (work / "docs").mkdir()
    write(work / "docs" / "README", b"read me\n", 0o444)
    (work / "docs").chmod(0o555)
    (work / "to-a").symlink_to("src/pkg/a.py")
    (work / "to-src").symlink_to("src")
    (work / "src" / "pkg" / "up").symlink_to("../../run.sh")
    (work / "dangling").symlink_to("not/there")
    (work / "empty-dir").mkdir()
    (work / "empty-dir").chmod(0o700)
    home.mkdir()
    (home / ".config" / "tool").mkdir(parents=True)
    write(home / ".config" / "tool" / "settings.json", b'{"a": 1}\n', 0o600)
    write(home / ".bashrc", b"print('a')\n")  # the same bytes again, in another root


async def in_pieces(data: bytes, rng: random.Random) -> AsyncIterator[bytes]:
    """``data`` in pieces of random sizes, some empty."""
    position = 0
    while position < len(data):
        size = rng.choice([0, 1, 7, 100, 4096, 70_000])
        yield data[position : position + size]
        position += size


async def packed(taken: TakenSnapshot, hashes: Iterable[str] | None = None) -> bytes:
    """The pack of ``hashes`` in their order (by default: all of the snapshot's, sorted)."""
    wanted = sorted(taken.manifest.hashes()) if hashes is None else hashes
    return b"".join([piece async for piece in pack_blobs(taken, wanted)])


async def restore(
    manifest: SnapshotManifest, roots: Mapping[str, Path], pack: bytes, seed: int = 0
) -> int:
    return await restore_snapshot(
        manifest, roots, in_pieces(pack, random.Random(seed)), max_blob_bytes=MAX_BLOB
    )


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def source(tmp_path: Path) -> dict[str, Path]:
    roots = {"work": tmp_path / "source" / "work", "home": tmp_path / "source" / "home"}
    roots["work"].parent.mkdir()
    realistic_tree(roots["work"], roots["home"])
    return roots


@pytest.fixture
def target(tmp_path: Path) -> dict[str, Path]:
    """Fresh roots: ``work`` absent, ``home`` an empty folder."""
    (tmp_path / "target" / "home").mkdir(parents=True)
    return {"work": tmp_path / "target" / "work", "home": tmp_path / "target" / "home"}


def untouched(target: Mapping[str, Path]) -> bool:
    """``target`` as the fixture made it: nothing staged, nothing left beside."""
    parent = target["home"].parent
    return sorted(os.listdir(parent)) == ["home"] and os.listdir(target["home"]) == []


# -- round trips ---------------------------------------------------------------------


async def test_a_realistic_tree_round_trips(
    source: dict[str, Path], target: dict[str, Path]
) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    assert taken.skipped == []
    files = taken.manifest.files
    assert len(taken.paths) == len(taken.manifest.hashes()) == len(files) - 3
    for sha256, path in taken.paths.items():
        assert sha(path.read_bytes()) == sha256
    backwards = sorted(taken.manifest.hashes(), reverse=True)  # any order will do
    restored = await restore(taken.manifest, target, await packed(taken, backwards), seed=1)
    assert restored == len(files)
    for name in ("work", "home"):
        assert walk(target[name]) == walk(source[name])
    assert sorted(os.listdir(target["work"].parent)) == ["home", "work"]
    copies = [target["work"] / "src/pkg/a.py", target["work"] / "src/pkg/same.py"]
    assert len({os.lstat(path).st_ino for path in copies}) == 2
    assert all(os.lstat(path).st_nlink == 1 for path in copies)


async def test_the_manifest_lists_each_folder_before_its_entries_by_name(
    source: dict[str, Path],
) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    assert [entry.path for entry in taken.manifest.entries] == [
        "home",
        "home/.bashrc",
        "home/.config",
        "home/.config/tool",
        "home/.config/tool/settings.json",
        "work",
        "work/big.bin",
        "work/dangling",
        "work/docs",
        "work/docs/README",
        "work/empty-dir",
        "work/run.sh",
        "work/src",
        "work/src/also-empty",
        "work/src/empty",
        "work/src/pkg",
        "work/src/pkg/a.py",
        "work/src/pkg/same.py",
        "work/src/pkg/up",
        "work/to-a",
        "work/to-src",
    ]
    again = await take_snapshot(dict(reversed(source.items())), max_bytes=10**6)
    assert again.manifest == taken.manifest


async def test_an_absent_root_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    write(tmp_path / "work" / "a", b"a")
    roots = {"work": tmp_path / "work", "home": tmp_path / "nowhere"}
    taken = await take_snapshot(roots, max_bytes=10)
    assert [entry.path for entry in taken.manifest.entries] == ["work", "work/a"]


async def test_special_files_and_links_that_leave_are_skipped(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    os.mkfifo(work / "fifo")
    (work / "absolute").symlink_to(work / "sub")
    (work / "sub" / "out").symlink_to("../../outside")
    (work / "sub" / "in").symlink_to("../sub/../fifo")
    os.mkdir(os.fsencode(work) + b"/bad-\xff-name")
    taken = await take_snapshot({"work": work}, max_bytes=10)
    assert taken.skipped == ["work/absolute", "work/bad-\\xff-name", "work/fifo", "work/sub/out"]
    listed = [entry.path for entry in taken.manifest.entries]
    assert listed == ["work", "work/sub", "work/sub/in"]


@pytest.mark.parametrize("limit", [29, 30])
async def test_more_bytes_than_allowed_are_refused(tmp_path: Path, limit: int) -> None:
    (tmp_path / "work").mkdir()
    write(tmp_path / "work" / "a", b"x" * 10)
    write(tmp_path / "work" / "b", b"x" * 10)  # the same bytes count again
    write(tmp_path / "work" / "c", b"y" * 10)
    if limit < 30:
        with pytest.raises(SnapshotTooLargeError):
            await take_snapshot({"work": tmp_path / "work"}, max_bytes=limit)
    else:
        taken = await take_snapshot({"work": tmp_path / "work"}, max_bytes=limit)
        assert taken.manifest.total_bytes == 30


_TAKE: Final = """
import sys, trio
from pathlib import Path
from typing import Final
from sandstream.container.snapshots import take_snapshot
from sandstream.container.errors import SnapshotError
try:
    trio.run(lambda: take_snapshot({"work": Path(sys.argv[1])}, max_bytes=10))
except SnapshotError as exc:
    print("SnapshotError:", exc)
"""


async def test_an_unreadable_file_is_an_error(tmp_path: Path) -> None:
    """Taken without the capabilities that let root read any file (setpriv drops
    them), as any other user would take it."""
    (tmp_path / "work").mkdir()
    write(tmp_path / "work" / "secret", b"x", 0o000)
    unprivileged = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    done = await trio.run_process(
        [*unprivileged, sys.executable, "-c", _TAKE, str(tmp_path / "work")],
        capture_stdout=True,
        capture_stderr=True,
    )
    assert done.stdout.decode().startswith("SnapshotError:"), done.stderr.decode()
    assert "secret" in done.stdout.decode()


async def test_a_root_that_is_not_a_folder_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "work", b"x")
    with pytest.raises(SnapshotError):
        await take_snapshot({"work": tmp_path / "work"}, max_bytes=10)


# -- packing -------------------------------------------------------------------------


async def test_a_pack_holds_each_asked_hash_once(source: dict[str, Path]) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    a_py = sha(b"print('a')\n")
    empty = sha(b"")
    pack = await packed(taken, [empty, a_py, empty])
    assert pack == blob_header(empty, 0) + blob_header(a_py, 11) + b"print('a')\n"


async def test_a_hash_not_in_the_snapshot_is_refused(source: dict[str, Path]) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    with pytest.raises(SnapshotError):
        await packed(taken, [sha(b"not there")])


@pytest.mark.parametrize("change", [b"print('b')\n", b"print('a')\n\n", b"print('a')"])
async def test_a_file_changed_since_it_was_hashed_is_refused(
    source: dict[str, Path], change: bytes
) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    a_py = sha(b"print('a')\n")
    taken.paths[a_py].write_bytes(change)
    with pytest.raises(SnapshotChangedError):
        await packed(taken, [a_py])


# -- refusals ------------------------------------------------------------------------


async def refuse(
    manifest: SnapshotManifest, target: dict[str, Path], pack: bytes, seed: int = 0
) -> None:
    with pytest.raises(SnapshotRestoreError):
        await restore(manifest, target, pack, seed)
    assert untouched(target)


async def test_a_tampered_blob_is_refused(source: dict[str, Path], target: dict[str, Path]) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    pack = bytearray(await packed(taken))
    pack[pack.index(bytes(range(256))) + 1000] ^= 1  # in big.bin
    for seed in range(3):
        await refuse(taken.manifest, target, bytes(pack), seed)


async def test_a_pack_missing_a_blob_or_with_one_too_many_is_refused(
    source: dict[str, Path], target: dict[str, Path]
) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    hashes = sorted(taken.manifest.hashes())
    whole = await packed(taken)
    await refuse(taken.manifest, target, await packed(taken, hashes[1:]))
    await refuse(taken.manifest, target, whole + blob_header(sha(b"extra"), 5) + b"extra")
    await refuse(taken.manifest, target, whole + await packed(taken, hashes[:1]))
    await refuse(taken.manifest, target, whole[:-1])
    await refuse(taken.manifest, target, b"")


async def test_a_pack_that_fails_while_read_is_refused(
    source: dict[str, Path], target: dict[str, Path]
) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    whole = await packed(taken)

    async def failing() -> AsyncIterator[bytes]:
        yield whole[: len(whole) // 2]
        raise OSError("connection reset")

    with pytest.raises(SnapshotRestoreError):
        await restore_snapshot(taken.manifest, target, failing(), max_blob_bytes=MAX_BLOB)
    assert untouched(target)


async def test_a_blob_over_the_bound_is_refused(
    source: dict[str, Path], target: dict[str, Path]
) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    pieces = in_pieces(await packed(taken), random.Random(0))
    with pytest.raises(SnapshotRestoreError):
        await restore_snapshot(taken.manifest, target, pieces, max_blob_bytes=1000)
    assert untouched(target)


def folder(path: str) -> SnapshotEntry:
    return SnapshotEntry(path, "dir")


def link(path: str, target: str) -> SnapshotEntry:
    return SnapshotEntry(path, "symlink", target=target)


def file(path: str, data: bytes, size: int | None = None) -> SnapshotEntry:
    return SnapshotEntry(path, "file", size=len(data) if size is None else size, sha256=sha(data))


A_PACK = blob_header(sha(b"a"), 1) + b"a"
"""The pack of a file holding ``a``."""

BAD_MANIFESTS = {
    "dot-dot": [folder("work"), folder("work/sub"), folder("work/sub/..")],
    "absolute": [folder("work"), file("/work/a", b"a")],
    "under a link": [folder("work"), link("work/l", "."), file("work/l/a", b"a")],
    "a link that leaves": [folder("work"), folder("work/sub"), link("work/sub/l", "../..")],
    "an unknown root": [folder("tmp"), file("tmp/a", b"a")],
    "a size not the blob's": [folder("work"), file("work/a", b"a", size=2)],
    "one hash, two sizes": [folder("work"), file("work/a", b"a"), file("work/b", b"a", size=2)],
}


@pytest.mark.parametrize("name", BAD_MANIFESTS)
async def test_a_bad_manifest_is_refused(name: str, target: dict[str, Path]) -> None:
    await refuse(SnapshotManifest(BAD_MANIFESTS[name]), target, A_PACK)


async def test_the_smallest_manifest_is_restored(target: dict[str, Path]) -> None:
    """The manifests above fail for the reason named, not for what they share."""
    manifest = SnapshotManifest([folder("work"), file("work/a", b"a")])
    assert await restore(manifest, target, A_PACK) == 1
    assert walk(target["work"]) == {".": ("dir", 0o755, b""), "a": ("file", 0o755, b"a")}


@pytest.mark.parametrize("what", ["not empty", "a file", "a link"])
async def test_a_root_in_use_is_refused(
    source: dict[str, Path], target: dict[str, Path], what: str
) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    pack = await packed(taken)
    home = target["home"]
    if what == "not empty":
        write(home / "kept", b"mine")
    elif what == "a file":
        home.rmdir()
        write(home, b"a file where home goes")
    else:
        home.rmdir()
        home.symlink_to(target["work"].parent)
    before = walk(home.parent)
    with pytest.raises(SnapshotRestoreError):
        await restore(taken.manifest, target, pack)
    assert walk(home.parent) == before


async def test_a_failure_while_moving_into_place_undoes_the_move(
    source: dict[str, Path], target: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``home`` is placed first; ``work`` then fails to move: ``home`` is emptied again."""
    taken = await take_snapshot(source, max_bytes=10**6)
    pack = await packed(taken)
    rename = os.rename

    def failing_rename(source: str | Path, target_path: str | Path) -> None:
        if Path(target_path) == target["work"]:
            raise OSError(28, "No space left on device")
        rename(source, target_path)

    target["home"].chmod(0o700)
    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(SnapshotRestoreError):
        await restore(taken.manifest, target, pack)
    assert untouched(target)
    assert stat.S_IMODE(os.lstat(target["home"]).st_mode) == 0o700


async def test_a_cancelled_restore_leaves_the_roots_as_they_were(
    source: dict[str, Path], target: dict[str, Path]
) -> None:
    taken = await take_snapshot(source, max_bytes=10**6)
    pack = await packed(taken)
    half_read = trio.Event()

    async def stalling() -> AsyncIterator[bytes]:
        yield pack[: len(pack) // 2]
        half_read.set()
        await trio.sleep_forever()

    async def cancel_when_half_read(scope: trio.CancelScope) -> None:
        await half_read.wait()
        assert os.listdir(target["home"]) != []  # staged inside home
        assert len(os.listdir(target["home"].parent)) == 2  # and beside the absent work
        scope.cancel()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_half_read, scope)
            await restore_snapshot(taken.manifest, target, stalling(), max_blob_bytes=MAX_BLOB)
    assert scope.cancelled_caught
    assert untouched(target)


# -- property ------------------------------------------------------------------------


@dataclass(frozen=True)
class File:
    data: bytes
    mode: int


@dataclass(frozen=True)
class Link:
    climb: int
    """How many folders its target climbs (``../``) before naming ``a``."""


@dataclass(frozen=True)
class Folder:
    mode: int
    children: dict[str, File | Link | Folder]


names = st.sampled_from(
    ["a", "b", "c", "d e", ".hidden", "\N{LATIN SMALL LETTER U WITH DIAERESIS}"]
)
contents = st.sampled_from([b"", b"x", b"same bytes", bytes(300)]) | st.binary(max_size=50)
file_modes = st.sampled_from([0o644, 0o755, 0o600, 0o444, 0o700])
folder_modes = st.sampled_from([0o755, 0o700, 0o555, 0o750])


def children(depth: int) -> st.SearchStrategy[dict[str, File | Link | Folder]]:
    """What a folder ``depth`` folders below its root holds: files, links that stay
    inside the root, and (above a depth of 2) folders."""
    child: st.SearchStrategy[File | Link | Folder] = st.builds(
        File, contents, file_modes
    ) | st.builds(Link, st.integers(0, depth))
    if depth < 2:
        child = child | st.builds(Folder, folder_modes, children(depth + 1))
    return st.dictionaries(names, child, max_size=4)


def make(folder: Path, items: dict[str, File | Link | Folder]) -> None:
    for name, item in items.items():
        path = folder / name
        if isinstance(item, Link):
            path.symlink_to("../" * item.climb + "a")
        elif isinstance(item, File):
            write(path, item.data, item.mode)
        else:
            path.mkdir()
            make(path, item.children)
            path.chmod(item.mode)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    work=st.builds(Folder, folder_modes, children(0)),
    home=st.builds(Folder, folder_modes, children(0)),
    seed=st.integers(0, 2**32),
)
async def test_random_trees_round_trip(
    tmp_path: Path, work: Folder, home: Folder, seed: int
) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as name:
        top = Path(name)
        source = {"work": top / "source" / "work", "home": top / "source" / "home"}
        source["home"].parent.mkdir()
        make(source["home"].parent, {"work": work, "home": home})
        taken = await take_snapshot(source, max_bytes=10**6)
        assert taken.skipped == []
        (top / "target").mkdir()
        target = {"work": top / "target" / "work", "home": top / "target" / "home"}
        target["home"].mkdir(mode=0o700)  # its mode is the snapshot's once restored
        pack = await packed(taken)
        assert await restore(taken.manifest, target, pack, seed) == len(taken.manifest.files)
        for root in ("work", "home"):
            assert walk(target[root]) == walk(source[root])
        assert sorted(os.listdir(top / "target")) == ["home", "work"]
