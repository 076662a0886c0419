"""Gemini CLI's saved sessions, named so that a later ``session/load`` finds them.

Gemini CLI keeps a session in ``~/.gemini/tmp/<project>/chats/session-<minute>-<id8>.jsonl``
(``<minute>`` the UTC minute it began, ``<id8>`` the session id's first 8 characters),
and lists a project's sessions from those files. Its ``session/load`` first starts a
recording for the loaded id as if it were new: one in the same minute as the session
began lands in the very file being loaded, and its ``$set`` of the messages (only the
session context) hides the whole conversation, so the load finds no session. Before the
agent starts, :func:`unpin_sessions` gives every file of that exact form a name Gemini CLI
never makes (``session-<minute>-kept-<id8>.jsonl``, ``kept2``…), which it still lists and
appends to, but never writes anew.

Bad input: a chats folder that cannot be read, an entry that is not a regular file, or
a name that is not of that form is left as it is; a name that is taken is never
overwritten (the next free one is used). Nothing here talks to the agent.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Final

__all__ = ["unpin_sessions"]

_MADE: Final = re.compile(r"session-(\d{4}-\d{2}-\d{2}T\d{2}-\d{2})-([0-9A-Za-z_-]{8})\.jsonl")
"""A session file's name as Gemini CLI makes it."""


def unpin_sessions(home: Path) -> list[Path]:
    """Rename the session files Gemini CLI made under ``home`` (see the module doc);
    the new paths."""
    renamed: list[Path] = []
    for chats in sorted((home / ".gemini" / "tmp").glob("*/chats")):
        with contextlib.suppress(OSError):
            with os.scandir(chats) as entries:
                made = [e for e in entries if _MADE.fullmatch(e.name) and _regular(e)]
            for entry in sorted(made, key=lambda e: e.name):
                kept = _keep(chats, entry.name)
                if kept is not None:
                    renamed.append(kept)
    return renamed


def _regular(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _keep(chats: Path, name: str) -> Path | None:
    """Rename ``chats/name`` to its first free kept name (a hard link, then the old
    name removed: a taken name is never replaced); ``None`` if it could not be."""
    found = _MADE.fullmatch(name)
    assert found is not None
    minute, short_id = found.groups()
    source = chats / name
    for number in range(1, 1000):
        mark = "kept" if number == 1 else f"kept{number}"
        target = chats / f"session-{minute}-{mark}-{short_id}.jsonl"
        try:
            os.link(source, target, follow_symlinks=False)
        except FileExistsError:
            continue
        except OSError:
            return None
        with contextlib.suppress(OSError):  # then both names hold it: Gemini CLI lists it once
            os.unlink(source)
        return target
    return None
