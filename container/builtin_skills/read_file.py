"""Skill ``read_file``: read a text file inside the work dir."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from container.builtin_skills._skilllib import confine, fail, read_args, relative, reply
else:  # run as a script: the skill's folder is sys.path[0]
    from _skilllib import confine, fail, read_args, relative, reply


def main() -> None:
    args = read_args()
    path = confine(args.get("path", ""))
    max_bytes = int(args.get("max_bytes", 256 * 1024))
    offset = int(args.get("offset", 0))
    if not path.exists():
        fail(f"no such file: {relative(path)}")
    if not path.is_file():
        fail(f"not a regular file: {relative(path)}")
    size = path.stat().st_size
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read(max_bytes)
    reply(
        {
            "path": relative(path),
            "size": size,
            "offset": offset,
            "content": data.decode("utf-8", "replace"),
            "truncated": offset + len(data) < size,
        }
    )


if __name__ == "__main__":
    main()
