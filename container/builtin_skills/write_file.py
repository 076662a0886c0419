"""Skill ``write_file``: write (or append to) a text file inside the work dir."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from container.builtin_skills._skilllib import (
        confine,
        fail,
        read_args,
        relative,
        reply,
        work_dir,
    )
else:  # run as a script: the skill's folder is sys.path[0]
    from _skilllib import confine, fail, read_args, relative, reply, work_dir


def main() -> None:
    args = read_args()
    path = confine(args.get("path", ""))
    content = args.get("content")
    if not isinstance(content, str):
        fail("content must be a string")
    if path == work_dir() or path.is_dir():
        fail(f"{relative(path)} is a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    with path.open("ab" if args.get("append") else "wb") as handle:
        handle.write(data)
    reply({"path": relative(path), "bytes": len(data), "size": path.stat().st_size})


if __name__ == "__main__":
    main()
