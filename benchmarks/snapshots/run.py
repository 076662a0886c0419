"""Workspace snapshots: what carrying a chat's workspace across sandboxes costs, against tar.

``.venv/bin/python -m benchmarks.snapshots.run [--files N] [--megabytes MB] [--edited K]
[--repeat R] [--seed S] [--json]`` (from the checkout: the ``benchmarks`` package is not
installed)

The workspace (:mod:`.generate`, seeded): a repository checked out with its
``node_modules`` (``--files`` files, about ``--megabytes`` MB) and an agent's home,
the roots ``work`` and ``home``, in a temp dir (``$TMPDIR``: the report names its file
system), its page cache warm. Each measure is wall time (``time.perf_counter``) on the
sandbox's side, in this process, without the HTTP transfer to and from the chat store
(nor the ``/snapshot/missing`` question a save asks first); each runs ``--repeat``
times, interleaved round by round with its baseline (which of the two goes first
alternates by round); the median (p50) and the best are reported. Before each timed
step the disk is synced, untimed, so that no step pays for the writeback of the one
before; a step itself syncs nothing.

- **save**: :func:`~sandstream.container.snapshots.take_snapshot` (walk, hash every
  file) and the blob pack of the blobs the chat store lacks read to its end into a null
  sink, as an upload reads it (:func:`~sandstream.container.snapshots.pack_blobs`);
  three turns: *first* (a new chat: every blob), *unchanged* (the store has every blob:
  none), *edited* (``--edited`` small ``src/`` files changed since the last save: only
  theirs). Baseline: a ``tar -cf`` subprocess writing the same roots to a file in the
  same temp dir (GNU tar reads no file it would write to ``/dev/null``), which sends the
  whole tree every turn.
- **restore**: :func:`~sandstream.container.snapshot_restore.restore_snapshot` into
  fresh empty roots from the whole pack, held in memory and fed in 256 KiB pieces by an
  async generator; baseline: ``tar -xpf`` of the same tree's archive into a fresh
  folder. The first restore of each kind is compared with the workspace (every path, its
  type, permission bits, bytes, link target): a difference ends the run with status 1.
  Goal: ≤ :data:`GOAL_RESTORE_MS` at p50.
- **stored per turn**: the bytes the chat store keeps for each save (the new blobs'
  bytes, and the manifest as the store keeps it, its JSON zlib-compressed at level 6,
  unless the store has that manifest already: an unchanged workspace's is its last
  turn's) as a fraction of the workspace's file bytes; tar's is 100% every turn (its archive, with
  its headers, is printed too). Also the manifest's JSON size and its zlib size (level
  6). Goal: an unchanged workspace stores ≤ :data:`GOAL_UNCHANGED_FRACTION` of its bytes.

Progress goes to stderr; ``--json`` prints every figure as JSON. The temp dir is removed
at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec
import trio

from benchmarks.support.report import Published, figure_line, goal_line, progress
from sandstream.container.snapshot_restore import restore_snapshot
from sandstream.container.snapshots import TakenSnapshot, pack_blobs, take_snapshot
from sandstream.core import SnapshotManifest, manifest_digest
from sandstream.server.chat.store import stored_manifest

from .generate import (
    DEFAULT_FILES,
    DEFAULT_MEGABYTES,
    DEFAULT_SEED,
    MIN_FILES,
    Workspace,
    edit_files,
    generate_workspace,
)

__all__ = ["CASES", "GOAL_RESTORE_MS", "GOAL_UNCHANGED_FRACTION", "PUBLISHED", "main", "run"]

CASES: Final = ("first", "unchanged", "edited")
"""The three saves: a new chat's, an unchanged workspace's, one with a few files edited."""
GOAL_RESTORE_MS: Final = 150.0
GOAL_UNCHANGED_FRACTION: Final = 0.01
MAX_BYTES: Final = 1024 * 1024 * 1024
"""The bound a save is taken under: the chat's default ``--snapshot-max-bytes``."""
PIECE_BYTES: Final = 256 * 1024
"""The pieces a restore is fed the pack in."""
_SECTION: Final = "Workspace snapshots: save and restore against tar"
_MACHINE: Final = "2 vCPUs, ext4, 5,000 files, 50 MB"
PUBLISHED: Final = {
    "restore_ms": Published(5_388, "ms", _MACHINE, _SECTION),
    "save_unchanged_ms": Published(471, "ms", _MACHINE, _SECTION),
    "unchanged_stored_percent": Published(0.00, "%", _MACHINE, _SECTION),
}
"""The figures docs/benchmarks.md gives (the run on the machine's disk): the restore's
goal not met, the unchanged save's met."""

A = TypeVar("A")
B = TypeVar("B")
Listing = dict[str, tuple[str, int, str]]
"""A tree as compared after a restore: path → (type, permission bits, SHA-256 or link
target)."""


class RestoreMismatchError(Exception):
    """A restored tree differs from the workspace it was taken of."""


@dataclass
class Timings:
    """One measure's wall times over the rounds, in seconds."""

    seconds: list[float] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "p50_ms": round(statistics.median(self.seconds) * 1e3, 2),
            "best_ms": round(min(self.seconds) * 1e3, 2),
            "rounds_ms": [round(s * 1e3, 2) for s in self.seconds],
        }


@dataclass
class Saved:
    """A timed save: its seconds (and those of the snapshot alone, before the pack is
    read), its snapshot, the blobs it sent and the pack's bytes read."""

    seconds: float
    take_seconds: float
    taken: TakenSnapshot
    sent: list[str]
    pack_bytes: int


@dataclass
class Rounds:
    """Everything the rounds measured."""

    save: dict[str, Timings] = field(default_factory=lambda: {c: Timings() for c in CASES})
    take: dict[str, Timings] = field(default_factory=lambda: {c: Timings() for c in CASES})
    tar_save: dict[str, Timings] = field(default_factory=lambda: {c: Timings() for c in CASES})
    restore: Timings = field(default_factory=Timings)
    tar_restore: Timings = field(default_factory=Timings)
    blobs: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in CASES})
    blob_bytes: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in CASES})
    pack_bytes: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in CASES})
    manifest_bytes: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in CASES})
    files_edited: int = 0
    """How many files each edited turn changed (``--edited``, or every ``src/`` file if
    fewer)."""


async def save(roots: Mapping[str, Path], stored: set[str]) -> Saved:
    """Take a snapshot of ``roots`` and read the pack of its blobs not in ``stored``."""
    start = time.perf_counter()
    taken = await take_snapshot(roots, max_bytes=MAX_BYTES)
    taken_at = time.perf_counter()
    sent = [sha256 for sha256 in sorted(taken.paths) if sha256 not in stored]
    read = 0
    async for piece in pack_blobs(taken, sent):
        read += len(piece)
    return Saved(time.perf_counter() - start, taken_at - start, taken, sent, read)


async def _tar(*args: str) -> float:
    """Seconds a ``tar`` subprocess takes, spawn to exit."""
    start = time.perf_counter()
    await trio.run_process(["tar", *args], stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


async def _pieces(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def _pack_pieces(taken: TakenSnapshot) -> list[bytes]:
    """The whole blob pack of ``taken``, in :data:`PIECE_BYTES` pieces."""
    pack = bytearray()
    async for piece in pack_blobs(taken, sorted(taken.manifest.hashes())):
        pack += piece
    return [bytes(pack[at : at + PIECE_BYTES]) for at in range(0, len(pack), PIECE_BYTES)]


def listing(roots: Mapping[str, Path]) -> Listing:
    """Every path under ``roots`` (the roots by name) with what a restore must keep."""
    found: Listing = {}
    for name, root in roots.items():
        _list(root, name, found)
    return found


def _list(disk: Path, path: str, found: Listing) -> None:
    status = os.lstat(disk)
    mode = stat.S_IMODE(status.st_mode)
    if stat.S_ISLNK(status.st_mode):
        found[path] = ("symlink", 0, os.readlink(disk))
    elif stat.S_ISREG(status.st_mode):
        found[path] = ("file", mode, hashlib.sha256(disk.read_bytes()).hexdigest())
    else:
        found[path] = ("dir", mode, "")
        for child in sorted(os.listdir(disk)):
            _list(disk / child, f"{path}/{child}", found)


def compare(restored: Listing, original: Listing, what: str) -> None:
    """Raise :class:`RestoreMismatchError` unless the two listings are equal."""
    if restored == original:
        return
    lost = sorted(original.keys() - restored.keys())
    added = sorted(restored.keys() - original.keys())
    changed = sorted(p for p in original.keys() & restored.keys() if original[p] != restored[p])
    raise RestoreMismatchError(
        f"{what} differs from the workspace: {len(lost)} path(s) missing {lost[:3]}, "
        f"{len(added)} extra {added[:3]}, {len(changed)} changed {changed[:3]}"
    )


async def _timed_pair(
    round_: int, ours: Callable[[], Awaitable[A]], theirs: Callable[[], Awaitable[B]]
) -> tuple[A, B]:
    """Run both, ours first on odd rounds, theirs first on even ones, each after the
    disk has what was written before it (``sync``)."""
    if round_ % 2:
        await _settle()
        mine = await ours()
        await _settle()
        return mine, await theirs()
    await _settle()
    other = await theirs()
    await _settle()
    return await ours(), other


async def _settle() -> None:
    """Write out what is dirty (the previous measure's archive, the trees removed), so
    that no measure pays for its predecessor's writeback."""
    await trio.to_thread.run_sync(os.sync)


class _Bench:
    """One run: the workspace, the chat store's blobs so far, the restore's inputs."""

    def __init__(self, tmp: Path, workspace: Workspace, edited: int) -> None:
        self.tmp = tmp
        self.workspace = workspace
        self.edited = edited
        self.rounds = Rounds()
        self.archive = tmp / "save.tar"
        self.stored: set[str] = set()
        self.original: Listing = {}
        self.manifest = SnapshotManifest()
        self.pieces: list[bytes] = []
        self.restore_archive = tmp / "restore.tar"

    def tar_create(self, archive: Path) -> Callable[[], Awaitable[float]]:
        """``tar -cf archive`` of the roots, to call."""
        base = str(self.workspace.base)
        return lambda: _tar("-cf", str(archive), "-C", base, "home", "work")

    async def prepare(self) -> None:
        """What the restores read: the pack and an archive of the workspace as it is
        now, and its listing to compare them with."""
        taken = await take_snapshot(self.workspace.roots, max_bytes=MAX_BYTES)
        self.manifest = taken.manifest
        self.pieces = await _pack_pieces(taken)
        await self.tar_create(self.restore_archive)()
        self.original = listing(self.workspace.roots)

    async def save_round(self, round_: int) -> None:
        manifests: set[str] = set()
        for case in CASES:
            if case == "first":
                self.stored = set()
            elif case == "edited":
                self.rounds.files_edited = len(edit_files(self.workspace, self.edited, round_))
            saved, tar_seconds = await _timed_pair(
                round_,
                lambda: save(self.workspace.roots, self.stored),
                self.tar_create(self.archive),
            )
            self.stored.update(saved.sent)
            sizes = {entry.sha256: entry.size for entry in saved.taken.manifest.files}
            rounds = self.rounds
            rounds.save[case].seconds.append(saved.seconds)
            rounds.take[case].seconds.append(saved.take_seconds)
            rounds.tar_save[case].seconds.append(tar_seconds)
            rounds.blobs[case].append(len(saved.sent))
            rounds.blob_bytes[case].append(sum(sizes[sha256] for sha256 in saved.sent))
            rounds.pack_bytes[case].append(saved.pack_bytes)
            digest = manifest_digest(saved.taken.manifest)
            stored = 0 if digest in manifests else len(stored_manifest(saved.taken.manifest))
            manifests.add(digest)
            rounds.manifest_bytes[case].append(stored)

    async def restore_round(self, round_: int) -> None:
        ours = self.tmp / f"restored-{round_}"
        theirs = self.tmp / f"untarred-{round_}"
        roots = {"home": ours / "home", "work": ours / "work"}
        for root in (*roots.values(), theirs):
            root.mkdir(parents=True)

        async def restore() -> float:
            start = time.perf_counter()
            await restore_snapshot(
                self.manifest,
                roots,
                _pieces(self.pieces),
                max_blob_bytes=self.manifest.total_bytes,
            )
            return time.perf_counter() - start

        async def untar() -> float:
            return await _tar("-xpf", str(self.restore_archive), "-C", str(theirs))

        seconds, tar_seconds = await _timed_pair(round_, restore, untar)
        self.rounds.restore.seconds.append(seconds)
        self.rounds.tar_restore.seconds.append(tar_seconds)
        if round_ == 1:
            compare(listing(roots), self.original, "the restored snapshot")
            compare(
                listing({"home": theirs / "home", "work": theirs / "work"}), self.original, "tar -x"
            )
        shutil.rmtree(ours)
        shutil.rmtree(theirs)


async def run(files: int, megabytes: float, edited: int, repeat: int, seed: int) -> dict[str, Any]:
    """Generate the workspace, measure ``repeat`` rounds, and return every figure."""
    load_before = os.getloadavg()[0]
    pressure_before = _pressure()
    with tempfile.TemporaryDirectory(prefix="sandstream-bench-snapshots-") as name:
        tmp = Path(name)
        progress(f"generating the workspace: {files:,} files, about {megabytes:g} MB, seed {seed}")
        workspace = generate_workspace(
            tmp / "workspace", files=files, megabytes=megabytes, seed=seed
        )
        bench = _Bench(tmp, workspace, edited)
        progress(f"workspace: {workspace.summary()}; packing it for the restores")
        await bench.prepare()
        for round_ in range(1, repeat + 1):
            progress(
                f"round {round_}/{repeat}: save (first, unchanged, {edited} edited) against tar -c"
            )
            await bench.save_round(round_)
            progress(f"round {round_}/{repeat}: restore against tar -x")
            await bench.restore_round(round_)
            progress(_round_line(bench.rounds))
        archive_bytes = bench.archive.stat().st_size
        filesystem = _filesystem(tmp)
    manifest_json = msgspec.json.encode(bench.manifest)
    return _result(
        bench,
        workspace,
        archive_bytes=archive_bytes,
        manifest_json=manifest_json,
        environment={
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "tar": _tar_version(),
            "filesystem": filesystem,
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "pressure_avg60": {"before": pressure_before, "after": _pressure()},
        },
        parameters={
            "files": files,
            "megabytes": megabytes,
            "edited": edited,
            "repeat": repeat,
            "seed": seed,
        },
    )


def _round_line(rounds: Rounds) -> str:
    last = [f"save {case} {rounds.save[case].seconds[-1] * 1e3:,.0f} ms" for case in CASES]
    tar = rounds.tar_save["first"].seconds[-1] * 1e3
    restore = rounds.restore.seconds[-1] * 1e3
    untar = rounds.tar_restore.seconds[-1] * 1e3
    return (
        f"{', '.join(last)} (tar -c {tar:,.0f} ms); restore {restore:,.0f} ms "
        f"(tar -x {untar:,.0f} ms)"
    )


def _result(
    bench: _Bench,
    workspace: Workspace,
    *,
    archive_bytes: int,
    manifest_json: bytes,
    environment: dict[str, Any],
    parameters: dict[str, Any],
) -> dict[str, Any]:
    rounds = bench.rounds
    total = bench.manifest.total_bytes
    saves: dict[str, Any] = {}
    stored: dict[str, Any] = {}
    for case in CASES:
        ours, tar = rounds.save[case].figures(), rounds.tar_save[case].figures()
        blob_bytes = int(statistics.median(rounds.blob_bytes[case]))
        manifest_bytes = int(statistics.median(rounds.manifest_bytes[case]))
        take = statistics.median(rounds.take[case].seconds)
        pack = statistics.median(
            whole - part
            for whole, part in zip(
                rounds.save[case].seconds, rounds.take[case].seconds, strict=True
            )
        )
        saves[case] = {
            "snapshot": ours,
            "take_p50_ms": round(take * 1e3, 2),
            "pack_p50_ms": round(pack * 1e3, 2),
            "tar": tar,
            "ratio": round(ours["p50_ms"] / tar["p50_ms"], 3),
            "blobs_sent": int(statistics.median(rounds.blobs[case])),
            "pack_bytes": int(statistics.median(rounds.pack_bytes[case])),
        }
        stored[case] = {
            "blob_bytes": blob_bytes,
            "manifest_bytes": manifest_bytes,
            "fraction": (blob_bytes + manifest_bytes) / total,
            "tar_fraction": 1.0,
        }
    restore, untar = rounds.restore.figures(), rounds.tar_restore.figures()
    compressed = len(zlib.compress(manifest_json, 6))
    unchanged = stored["unchanged"]["fraction"]
    return {
        "workspace": {
            "files": len(bench.manifest.files),
            "distinct_blobs": len(bench.manifest.hashes()),
            "folders": sum(entry.type == "dir" for entry in bench.manifest.entries),
            "links": sum(entry.type == "symlink" for entry in bench.manifest.entries),
            "bytes": total,
            "generated": workspace.summary(),
        },
        "save": saves,
        "restore": {
            "snapshot": restore,
            "tar": untar,
            "ratio": round(restore["p50_ms"] / untar["p50_ms"], 3),
            "pieces": len(bench.pieces),
            "verified": True,
            "compared_paths": len(bench.original),
        },
        "stored": {
            **stored,
            "tar_archive_bytes": archive_bytes,
            "tar_archive_fraction": archive_bytes / total,
            "manifest_json_bytes": len(manifest_json),
            "manifest_zlib_bytes": compressed,
        },
        "goals": {
            "restore_p50_ms": {
                "goal": GOAL_RESTORE_MS,
                "measured": restore["p50_ms"],
                "met": restore["p50_ms"] <= GOAL_RESTORE_MS,
            },
            "unchanged_stored_fraction": {
                "goal": GOAL_UNCHANGED_FRACTION,
                "measured": unchanged,
                "met": unchanged <= GOAL_UNCHANGED_FRACTION,
            },
        },
        "files_edited": rounds.files_edited,
        "parameters": parameters,
        "environment": environment,
    }


def _filesystem(path: Path) -> str:
    """The type of the file system ``path`` is on (from ``/proc/self/mounts``)."""
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return kind
    resolved = str(path.resolve())
    for line in mounts:
        fields = line.split()
        point = fields[1]
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, f"{fields[2]} ({fields[0]} on {point})"
    return kind


def _pressure() -> dict[str, float]:
    """The share of the last minute some task waited for a CPU, and for I/O, in %
    (Linux's pressure stall information; empty where there is none)."""
    found = {}
    for kind in ("cpu", "io"):
        try:
            some = Path(f"/proc/pressure/{kind}").read_text().splitlines()[0]
        except (OSError, IndexError):
            continue
        fields = dict(field.split("=") for field in some.split()[1:])
        found[kind] = float(fields["avg60"])
    return found


def _tar_version() -> str:
    done = subprocess.run(["tar", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.partition("\n")[0]


def format_report(result: dict[str, Any]) -> str:
    """The figures as text: a table of times, one of bytes stored, the goals."""
    space, params = result["workspace"], result["parameters"]
    lines = [
        f"workspace: {space['files']:,} files ({space['distinct_blobs']:,} distinct), "
        f"{space['folders']:,} folders, {space['links']:,} links, {space['bytes'] / 1e6:,.1f} MB; "
        f"seed {params['seed']}",
        f"wall ms, p50 (best) of {params['repeat']} interleaved rounds; sandbox side, local "
        f"disk ({result['environment']['filesystem']}), no HTTP",
        "",
        "| measure | snapshot p50 (best) | of it: take / pack | tar p50 (best) | snapshot ÷ tar |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {
        "first": "save, first turn: every blob",
        "unchanged": "save, unchanged: no blob",
        "edited": f"save, {result['files_edited']} files edited: their blobs",
    }
    for case in CASES:
        row = result["save"][case]
        lines.append(
            f"| {names[case]} ({row['blobs_sent']:,} sent, {row['pack_bytes']:,} B) | "
            f"{_ms(row['snapshot'])} | {row['take_p50_ms']:,.1f} / {row['pack_p50_ms']:,.1f} | "
            f"{_ms(row['tar'])} | {row['ratio']:.2f} |"
        )
    restore = result["restore"]
    lines.append(
        f"| restore ({restore['pieces']:,} pieces of 256 KiB) | {_ms(restore['snapshot'])} | | "
        f"{_ms(restore['tar'])} | {restore['ratio']:.2f} |"
    )
    stored = result["stored"]
    lines += [
        "",
        "| turn | new blob bytes | new manifest bytes | stored ÷ workspace | tar |",
        "|---|---:|---:|---:|---:|",
    ]
    for case in CASES:
        row = stored[case]
        lines.append(
            f"| {case} | {row['blob_bytes']:,} | {row['manifest_bytes']:,} | "
            f"{row['fraction']:.2%} | 100% |"
        )
    lines += [
        "",
        f"tar's archive: {stored['tar_archive_bytes']:,} B, {stored['tar_archive_fraction']:.2%} "
        "of the workspace's bytes, every turn",
        f"manifest JSON: {stored['manifest_json_bytes']:,} B; as stored (zlib level 6): "
        f"{stored['manifest_zlib_bytes']:,} B, once per distinct manifest",
        "",
        figure_line("restore p50", restore["snapshot"]["p50_ms"], PUBLISHED["restore_ms"]),
        figure_line(
            "save p50, unchanged",
            result["save"]["unchanged"]["snapshot"]["p50_ms"],
            PUBLISHED["save_unchanged_ms"],
        ),
        figure_line(
            "stored by an unchanged save",
            stored["unchanged"]["fraction"] * 100,
            PUBLISHED["unchanged_stored_percent"],
        ),
    ]
    goals = result["goals"]
    lines.append(
        goal_line(
            f"restore <= {GOAL_RESTORE_MS:g} ms at p50 (sandbox side, local disk, no HTTP)",
            f"{goals['restore_p50_ms']['measured']:,.1f} ms",
            goals["restore_p50_ms"]["met"],
            PUBLISHED["restore_ms"],
            PUBLISHED["restore_ms"].value <= GOAL_RESTORE_MS,
        )
    )
    lines.append(
        goal_line(
            f"an unchanged save stores <= {GOAL_UNCHANGED_FRACTION:.0%} of the workspace's bytes",
            f"{goals['unchanged_stored_fraction']['measured']:.2%}",
            goals["unchanged_stored_fraction"]["met"],
            PUBLISHED["unchanged_stored_percent"],
            PUBLISHED["unchanged_stored_percent"].value <= GOAL_UNCHANGED_FRACTION * 100,
        )
    )
    environment = result["environment"]
    lines.append(
        f"load average (1 min): {environment['load_average_1m']}; pressure, % of the last "
        f"minute some task waited (before, after): {environment['pressure_avg60']}"
    )
    return "\n".join(lines)


def _ms(figures: dict[str, Any]) -> str:
    return f"{figures['p50_ms']:,.1f} ({figures['best_ms']:,.1f})"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit status 1 if a restore does not give the workspace back."""
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m benchmarks.snapshots.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--files", type=int, default=DEFAULT_FILES, help="regular files")
    parser.add_argument("--megabytes", type=float, default=DEFAULT_MEGABYTES, help="their MB")
    parser.add_argument("--edited", type=int, default=5, help="files edited before a save")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (median reported)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.files < MIN_FILES or args.megabytes < 0 or args.edited < 1 or args.repeat < 1:
        parser.error(f"--files >= {MIN_FILES}, --megabytes >= 0, --edited and --repeat >= 1")
    try:
        result = trio.run(run, args.files, args.megabytes, args.edited, args.repeat, args.seed)
    except RestoreMismatchError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
