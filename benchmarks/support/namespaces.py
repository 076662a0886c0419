"""The live processes of a PID namespace (a bwrap sandbox's), read from ``/proc``."""

from __future__ import annotations

import os

__all__ = ["namespace_members"]


def namespace_members(namespace: int) -> list[int]:
    """Live (non-zombie) processes of the PID namespace with inode ``namespace``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}/ns/pid").st_ino != namespace:
                continue
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2 :][:1] not in (b"Z", b"X"):
            found.append(int(name))
    return found
