"""Safe file names: a client's or a sandbox's name made safe to store, show and write.

Shared by the chat backend (uploads, written-back results, the attachment paths it
tells the sandbox) and the container (which checks those paths before writing), so
both sides apply exactly one rule.
"""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = ["MAX_COMPONENT_BYTES", "MAX_NAME_BYTES", "sanitize_name"]

MAX_NAME_BYTES: Final = 1024
"""Longest stored file name (a relative path for results), in UTF-8 bytes."""
MAX_COMPONENT_BYTES: Final = 255
"""Longest component of a name (a file name), in UTF-8 bytes."""


def _clip(text: str, limit: int) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", errors="ignore")


def sanitize_name(name: str | None, *, keep_dirs: bool = False) -> str:
    """A safe file name from a client's.

    Backslashes count as separators; control and format characters are removed;
    ``.``/``..``/empty components are dropped (so no name escapes or starts at a
    root); components are trimmed of surrounding spaces and trailing dots and
    clipped to 255 bytes (then trimmed again). The result is its own sanitized form
    (``sanitize_name(sanitize_name(x)) == sanitize_name(x)``), which the container
    relies on to check the names it is sent. With ``keep_dirs`` the result is a relative POSIX path
    (``reports/summary.md``), else its last component. Never empty (``file``).
    """
    text = unicodedata.normalize("NFC", name or "").replace("\\", "/")
    text = "".join(ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cf", "Cs"))
    parts = []
    for part in text.split("/"):
        part = _trim(_clip(_trim(part), MAX_COMPONENT_BYTES))
        if part:  # "", "." and ".." trim to ""
            parts.append(part)
    if not parts:
        return "file"
    if not keep_dirs:
        return parts[-1]
    clipped = _clip("/".join(parts), MAX_NAME_BYTES).split("/")
    return "/".join(p for p in map(_trim, clipped) if p) or "file"


def _trim(part: str) -> str:
    """``part`` without surrounding whitespace and trailing dots (until none is left)."""
    while True:
        trimmed = part.strip().rstrip(".")
        if trimmed == part:
            return part
        part = trimmed
