"""A chat's workspace to snapshot, made deterministically from a seed.

``.venv/bin/python -m benchmarks.snapshots.generate [--files N] [--megabytes MB] [--seed S]``
prints the mix of one workspace (made in a temp dir, then removed).

:func:`generate_workspace` writes two roots under a folder. ``work``: a checked-out
repository — a few top-level files, a ``src/`` tree of small sources, a ``.git``-like
folder of small incompressible objects (read-only, as git writes them) — with its
``node_modules``: packages, some scoped, each with its ``package.json``, ``README.md``,
``LICENSE`` (one of three texts, so the same bytes recur across packages),
``lib/*.js``; some with an executable ``bin/cli.js`` linked from ``node_modules/.bin``
(relative links), some with a ``.d.ts``, a few with a large ``.js.map`` or ``.wasm``,
and some holding a nested ``node_modules/<dep>`` that is a byte-for-byte copy of an
earlier package. ``home``: an agent's home, a few dotfiles and its state (a session
log, a link to it). There are exactly ``files`` regular files; their bytes come to about
``megabytes`` MB (10^6 bytes): the small files are sized first, and the large ones share
what is left (at least 1 KiB each, so a tiny budget ends a little over).
:func:`edit_files` changes a few of the ``src/`` files as an agent's turn would.

The same arguments give the same names, bytes, modes and links. Bad input:
:class:`ValueError` for fewer than :data:`MIN_FILES` files or a negative size.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import random
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_FILES",
    "DEFAULT_MEGABYTES",
    "DEFAULT_SEED",
    "MIN_FILES",
    "Workspace",
    "edit_files",
    "generate_workspace",
]

DEFAULT_FILES: Final = 5_000
DEFAULT_MEGABYTES: Final = 50.0
DEFAULT_SEED: Final = 1
MIN_FILES: Final = 30
"""The fewest files a workspace is made of: its fixed ones and a few packages."""

_WORDS: Final = (
    "stream", "session", "sandbox", "chat", "turn", "agent", "snapshot", "manifest",
    "workspace", "blob", "pack", "file", "folder", "restore", "save", "upload", "token",
    "runner", "container", "server", "client", "cursor", "offset", "value", "result", "error",
    "event", "frame", "buffer", "reader", "writer", "handle", "config", "module", "package",
    "build", "test", "index", "parse", "render", "state", "cache", "queue", "limit", "bound",
    "check",
)  # fmt: skip
_LICENSES: Final = (
    "MIT License\n\nCopyright (c) Contributors\n\n",
    "ISC License\n\nCopyright (c) Isaac Z. Schlueter and Contributors\n\n",
    "Apache License\nVersion 2.0, January 2004\nhttp://www.apache.org/licenses/\n\n",
)


@dataclass
class Workspace:
    """A generated workspace: its roots by name (``work``, ``home``) and what it holds."""

    base: Path
    roots: dict[str, Path]
    files: int
    bytes: int
    folders: int
    links: int
    sources: list[Path] = field(default_factory=list)
    """The ``src/`` files, the ones :func:`edit_files` changes."""

    def summary(self) -> str:
        return (
            f"{self.files:,} files, {self.bytes / 1e6:,.1f} MB, {self.folders:,} folders, "
            f"{self.links:,} links"
        )


@dataclass
class _File:
    path: str  # relative to the base: work/..., home/...
    mode: int
    data: bytes | None = None  # None: a large file, its bytes made once sized
    kind: str = ""  # a large file's kind: "map" or "wasm"
    size: int = 0


@dataclass
class _Plan:
    rng: random.Random
    js: list[str]
    prose: list[str]
    files: list[_File] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)  # path: relative target
    packages: list[tuple[str, str, list[_File]]] = field(default_factory=list)
    """Packages of small files only (folder, name, files), for nested copies."""

    def add(self, path: str, data: bytes | None = None, mode: int = 0o644, kind: str = "") -> None:
        self.files.append(_File(path, mode, data, kind))

    def text(self, lines: list[str], median: int, low: int, high: int) -> bytes:
        """About ``median`` bytes (log-normal, within ``low``..``high``) of ``lines``."""
        size = min(high, max(low, int(self.rng.lognormvariate(math.log(median), 0.7))))
        average = sum(map(len, lines[:50])) / 50 + 1
        picked = self.rng.choices(lines, k=int(size / average) + 8)
        return ("\n".join(picked)[: size - 1] + "\n").encode()


def generate_workspace(
    base: Path,
    *,
    files: int = DEFAULT_FILES,
    megabytes: float = DEFAULT_MEGABYTES,
    seed: int = DEFAULT_SEED,
) -> Workspace:
    """Write the workspace of ``seed`` under ``base`` (an empty or absent folder):
    ``files`` regular files of about ``megabytes`` MB in ``base/work`` and ``base/home``."""
    if files < MIN_FILES:
        raise ValueError(f"a workspace has at least {MIN_FILES} files, not {files}")
    if megabytes < 0:
        raise ValueError(f"negative size {megabytes} MB")
    rng = random.Random(seed)
    plan = _Plan(rng, _js_lines(rng), _prose_lines(rng))
    _plan_home(plan)
    _plan_repository(plan, files)
    _plan_node_modules(plan, files - len(plan.files))
    _size_large(plan, int(megabytes * 1e6))
    return _write(base, plan)


def edit_files(workspace: Workspace, count: int, turn: int) -> list[Path]:
    """Change ``count`` of the ``src/`` files (a line added to each, its text naming
    ``turn``, so each turn's edits are new bytes); the files changed."""
    rng = random.Random(f"edit {turn}")
    chosen = rng.sample(workspace.sources, min(count, len(workspace.sources)))
    for number, path in enumerate(chosen):
        lines = path.read_bytes().split(b"\n")
        at = rng.randrange(len(lines))
        lines.insert(at, f"  // turn {turn}: change {number} by the agent".encode())
        path.write_bytes(b"\n".join(lines))
    return chosen


def _js_lines(rng: random.Random) -> list[str]:
    names = [f"{rng.choice(_WORDS)}{rng.choice(_WORDS).title()}" for _ in range(400)]
    shapes = (
        "const {a} = require('./{b}');",
        "function {a}({b}, {c}) {{",
        "  if ({a} === undefined) return {b};",
        "  return {a}.{b}({c});",
        "}}",
        "exports.{a} = {b};",
        "  for (const {a} of {b}) {c}.push({a});",
        "  /** {a}: the {b} of the {c}. */",
        "  const {a} = await {b}.{c}();",
        "module.exports = {{ {a}, {b}, {c} }};",
    )
    return [
        rng.choice(shapes).format(a=rng.choice(names), b=rng.choice(names), c=rng.choice(names))
        for _ in range(3_000)
    ]


def _prose_lines(rng: random.Random) -> list[str]:
    return [" ".join(rng.choices(_WORDS, k=rng.randint(3, 14))) for _ in range(1_000)]


def _plan_home(plan: _Plan) -> None:
    rng = plan.rng
    session = f"{rng.getrandbits(64):016x}"
    plan.add("home/.bashrc", b"export PATH=$HOME/.local/bin:$PATH\nalias ll='ls -l'\n")
    plan.add("home/.profile", b"[ -f ~/.bashrc ] && . ~/.bashrc\n")
    plan.add("home/.gitconfig", b"[user]\n\tname = Agent\n\temail = agent@example.com\n")
    settings = {"model": "stand-in", "permissions": {"allow": ["Bash", "Edit"]}, "theme": "dark"}
    plan.add("home/.config/agent/settings.json", json.dumps(settings, indent=2).encode())
    log = "".join(
        json.dumps({"turn": turn, "role": rng.choice(["user", "assistant"]), "text": line}) + "\n"
        for turn, line in enumerate(rng.choices(plan.prose, k=400))
    )
    plan.add(f"home/.agent/sessions/{session}.jsonl", log.encode(), 0o600)
    plan.add("home/.agent/history.jsonl", log[:2_000].encode(), 0o600)
    plan.add("home/.agent/state.json", json.dumps({"last_session": session}).encode(), 0o600)
    plan.links["home/.agent/latest.jsonl"] = f"sessions/{session}.jsonl"


def _plan_repository(plan: _Plan, files: int) -> None:
    rng = plan.rng
    plan.add("work/package.json", json.dumps({"name": "app", "private": True}, indent=2).encode())
    plan.add("work/package-lock.json", plan.text(plan.prose, 60_000, 20_000, 200_000))
    plan.add("work/README.md", plan.text(plan.prose, 4_000, 1_000, 12_000))
    plan.add("work/tsconfig.json", b'{"compilerOptions": {"strict": true, "outDir": "dist"}}\n')
    plan.add("work/.gitignore", b"dist/\n*.log\n")
    plan.add("work/.git/HEAD", b"ref: refs/heads/main\n")
    plan.add("work/.git/config", b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
    plan.add("work/.git/description", b"Unnamed repository.\n")
    plan.add("work/.git/refs/heads/main", f"{rng.getrandbits(160):040x}\n".encode())
    plan.add("work/.git/index", b"DIRC" + rng.randbytes(100 * max(1, files // 20)))
    for _ in range(max(2, files // 10)):  # loose objects: zlib-compressed, incompressible
        name = f"{rng.getrandbits(160):040x}"
        data = rng.randbytes(min(8_000, max(40, int(rng.lognormvariate(math.log(600), 0.9)))))
        plan.add(f"work/.git/objects/{name[:2]}/{name[2:]}", data, 0o444)
    areas = ("components", "lib", "server", "hooks", "api", "utils")
    for index in range(max(3, files // 20)):
        area = rng.choice(areas)
        folder = f"work/src/{area}" if index % 3 else f"work/src/{area}/{rng.choice(_WORDS)}"
        data = plan.text(plan.js, 2_500, 300, 12_000)
        plan.add(f"{folder}/{rng.choice(_WORDS)}{index}.ts", data)


def _plan_node_modules(plan: _Plan, files: int) -> None:
    """``files`` files (exactly) in packages under ``work/node_modules``."""
    rng = plan.rng
    names: set[str] = set()
    while files > 0:
        name = f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}"
        if name in names:
            continue
        names.add(name)
        if rng.random() < 0.15:
            name = f"@{rng.choice(_WORDS)}/{name}"
        made = _package(plan, f"work/node_modules/{name}", name, len(names), files)
        files -= made


def _package(plan: _Plan, folder: str, name: str, number: int, room: int) -> int:
    """Plan one package of at most ``room`` files (a nested copy included); its files."""
    rng = plan.rng
    start = len(plan.files)
    if plan.packages and room > 6 and rng.random() < 0.1:  # a nested copy of an earlier one
        source, source_name, copied = rng.choice(plan.packages)
        if len(copied) < room - 1:
            for original in copied:
                inner = original.path.removeprefix(f"{source}/")
                plan.add(
                    f"{folder}/node_modules/{source_name}/{inner}", original.data, original.mode
                )
    version = f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 20)}"
    manifest = {"name": name, "version": version, "main": "lib/index.js", "license": "MIT"}
    wanted: list[tuple[str, bytes | None, int]] = [
        (f"{folder}/package.json", json.dumps(manifest, indent=2).encode(), 0o644),
        (f"{folder}/LICENSE", _LICENSES[rng.randrange(3)].encode() * 20, 0o644),
        (f"{folder}/README.md", plan.text(plan.prose, 2_500, 300, 20_000), 0o644),
        (f"{folder}/lib/index.js", None, 0o644),
    ]
    for index in range(min(int(rng.expovariate(1 / 4)), 30)):
        wanted.append((f"{folder}/lib/{rng.choice(_WORDS)}{index}.js", None, 0o644))
    if rng.random() < 0.3:
        wanted.append((f"{folder}/index.d.ts", plan.text(plan.js, 1_500, 300, 8_000), 0o644))
    if number == 1 or rng.random() < 0.1:
        wanted.append((f"{folder}/bin/cli.js", b"#!/usr/bin/env node\nrequire('../lib');\n", 0o755))
    large = ""
    if number == 1 or rng.random() < 0.08:
        large = "map"
    elif number == 2 or rng.random() < 0.02:
        large = "wasm"
    left = room - (len(plan.files) - start)
    own = len(plan.files)
    for path, data, mode in wanted[: max(1, left - (1 if large else 0))]:
        plan.add(path, data if data is not None else plan.text(plan.js, 3_000, 200, 40_000), mode)
        if path.endswith("/bin/cli.js"):
            plan.links[f"work/node_modules/.bin/{name.rpartition('/')[2]}"] = (
                f"../{name}/bin/cli.js"
            )
    if large and len(plan.files) - start < room:
        suffix = "js.map" if large == "map" else "wasm"
        plan.add(f"{folder}/dist/{name.rpartition('/')[2]}.{suffix}", kind=large)
    else:  # small files only: a package a later one may hold a copy of
        plan.packages.append((folder, name, plan.files[own:]))
    return len(plan.files) - start


def _size_large(plan: _Plan, target: int) -> None:
    """Share what the small files leave of ``target`` among the large ones (a wasm
    weighs four maps), then make their bytes."""
    small = sum(len(f.data) for f in plan.files if f.data is not None)
    large = [f for f in plan.files if f.data is None]
    weights = [(4 if f.kind == "wasm" else 1) * plan.rng.uniform(0.3, 1.7) for f in large]
    left = max(0, target - small)
    for item, weight in zip(large, weights, strict=True):
        item.size = max(1024, int(left * weight / sum(weights)))
        if item.kind == "wasm":
            item.data = b"\0asm\1\0\0\0" + plan.rng.randbytes(item.size - 8)
        else:
            head = b'{"version":3,"sources":["../src/index.ts"],"mappings":"'
            body = base64.b64encode(plan.rng.randbytes(item.size * 3 // 4))
            item.data = (head + body)[: item.size - 2] + b'"}'


def _write(base: Path, plan: _Plan) -> Workspace:
    folders: set[str] = set()
    for item in plan.files:
        _folders(base, item.path, folders)
        assert item.data is not None
        disk = base / item.path
        disk.write_bytes(item.data)
        os.chmod(disk, item.mode)
    for path, target in plan.links.items():
        _folders(base, path, folders)
        os.symlink(target, base / path)
    for folder in folders:
        os.chmod(base / folder, 0o700 if folder.endswith("/.agent") else 0o755)
    total = sum(len(item.data or b"") for item in plan.files)
    sources = sorted(base / f.path for f in plan.files if f.path.startswith("work/src/"))
    roots = {"home": base / "home", "work": base / "work"}
    return Workspace(base, roots, len(plan.files), total, len(folders), len(plan.links), sources)


def _folders(base: Path, path: str, made: set[str]) -> None:
    parent = path.rpartition("/")[0]
    if parent not in made:
        (base / parent).mkdir(parents=True, exist_ok=True)
        parts = parent.split("/")
        made.update("/".join(parts[:depth]) for depth in range(1, len(parts) + 1))


def describe(root: Path) -> dict[str, int]:
    """Regular files, their bytes, folders and links under ``root``."""
    counts = {"files": 0, "bytes": 0, "folders": 0, "links": 0, "executables": 0}
    for folder, dirs, names in os.walk(root):
        counts["folders"] += len(dirs)
        for name in [*names, *dirs]:
            status = os.lstat(os.path.join(folder, name))
            if stat.S_ISLNK(status.st_mode):
                counts["links"] += 1
            elif stat.S_ISREG(status.st_mode):
                counts["files"] += 1
                counts["bytes"] += status.st_size
                counts["executables"] += bool(status.st_mode & 0o100)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m benchmarks.snapshots.generate", description=__doc__
    )
    parser.add_argument("--files", type=int, default=DEFAULT_FILES)
    parser.add_argument("--megabytes", type=float, default=DEFAULT_MEGABYTES)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sandstream-bench-workspace-") as tmp:
        workspace = generate_workspace(
            Path(tmp), files=args.files, megabytes=args.megabytes, seed=args.seed
        )
        print(f"workspace: {workspace.summary()}")
        for name, root in workspace.roots.items():
            print(f"  {name}: {describe(root)}")
        modules = describe(workspace.roots["work"] / "node_modules")
        print(f"  work/node_modules: {modules}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
