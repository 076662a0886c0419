"""Helpers shared by the built-in skills (imported from the skill's own folder).

A skill reads its args as one JSON object on stdin, prints one JSON value on stdout
and exits 0; on failure it prints a message on stderr and exits 1.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn


def fail(message: str) -> NoReturn:
    """Report a failure (stderr, exit status 1)."""
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(1)


def read_args() -> dict[str, Any]:
    """The call's args: a JSON object on stdin."""
    try:
        args = json.load(sys.stdin)
    except ValueError as exc:
        fail(f"args are not JSON: {exc}")
    if not isinstance(args, dict):
        fail("args must be a JSON object")
    return args


def reply(value: Any) -> None:
    """Print the call's answer as JSON on stdout."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False))
    sys.stdout.write("\n")
    sys.stdout.flush()


def work_dir() -> Path:
    """The run's work dir (``SANDSTREAM_WORK_DIR``, else the current dir), resolved."""
    return Path(os.environ.get("SANDSTREAM_WORK_DIR") or os.getcwd()).resolve()


def confine(path: str) -> Path:
    """Resolve ``path`` (relative to the work dir) and refuse it if it escapes the work dir.

    Symlinks are resolved first, so a link pointing outside is refused too.
    """
    if not isinstance(path, str) or not path:
        fail("path must be a non-empty string")
    if "\x00" in path:
        fail("path contains a NUL byte")
    root = work_dir()
    candidate = Path(path)
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        fail(f"path {path!r} is outside the work dir")
    return resolved


def relative(path: Path) -> str:
    """``path`` relative to the work dir, POSIX style (``.`` for the work dir itself)."""
    rel = path.relative_to(work_dir()).as_posix()
    return rel or "."
