"""Skill ``list_files``: list a directory inside the work dir (optionally recursive)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from container.builtin_skills._skilllib import confine, fail, read_args, relative, reply
else:  # run as a script: the skill's folder is sys.path[0]
    from _skilllib import confine, fail, read_args, relative, reply


def _entry(path: Path) -> dict[str, Any]:
    info = path.lstat()
    if path.is_symlink():
        kind = "symlink"
    elif path.is_dir():
        kind = "dir"
    else:
        kind = "file"
    entry: dict[str, Any] = {"path": relative(path), "type": kind}
    if kind == "file":
        entry["size"] = info.st_size
    return entry


def main() -> None:
    args = read_args()
    root = confine(args.get("path", ".") or ".")
    recursive = bool(args.get("recursive", False))
    limit = int(args.get("max_entries", 1000))
    if not root.is_dir():
        fail(f"not a directory: {relative(root)}")
    entries: list[dict[str, Any]] = []
    truncated = False
    if recursive:
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(dirs + files):
                if len(entries) >= limit:
                    truncated = True
                    break
                entries.append(_entry(Path(folder) / name))
            if truncated:
                break
    else:
        for child in sorted(root.iterdir()):
            if len(entries) >= limit:
                truncated = True
                break
            entries.append(_entry(child))
    reply({"path": relative(root), "entries": entries, "truncated": truncated})


if __name__ == "__main__":
    main()
