"""Where the ACP agents' npm packages are installed: one directory the host's
``sandstream agents install`` writes and the runner mounts read-only into sandboxes.

:func:`default_agents_dir` is ``$SANDSTREAM_AGENTS_DIR``, else
``$XDG_CACHE_HOME/sandstream/agents`` (``~/.cache`` when unset). Nothing here touches
the file system.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = ["AGENTS_DIR_ENV", "default_agents_dir"]

AGENTS_DIR_ENV: Final = "SANDSTREAM_AGENTS_DIR"
"""The variable naming the agents dir (the runner sets it inside sandboxes)."""


def default_agents_dir(env: Mapping[str, str] | None = None) -> Path:
    """The agents dir ``env`` (default: this process's environment) names."""
    environ = os.environ if env is None else env
    if environ.get(AGENTS_DIR_ENV):
        return Path(environ[AGENTS_DIR_ENV])
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".cache"
    )
    return Path(cache) / "sandstream" / "agents"
