"""The agent's shield: a preload library that hides each agent process from what it runs.

The kernel resets a process's dumpable flag at every ``execve`` (from the program file's
readability, not from its parent), so the agent, a program of its own, cannot inherit
the container's (:func:`~sandstream.container.procs.hide_from_children`). ``shield.c``,
beside this module, is built once per agents dir by ``sandstream agents install``
(:func:`build_shield`, with the system's C compiler) into ``shield-<label>.so``, the
label a digest of the source; :func:`shield_env` puts it first in ``LD_PRELOAD``, so its
constructor runs in the agent's process, and in every dynamically linked program the
agent starts, before the program's own code. It makes each of them non-dumpable: what
holds the agent's stdio and keys is then out of reach of ``ptrace`` and
``/proc/<pid>/{fd,mem,environ}`` for every process of the sandbox (same uid, no
``CAP_SYS_PTRACE``). In the agent, the first process that loads it, it also installs a
seccomp filter that everything the agent starts inherits, and forks a supervisor that
refuses each signal (by pid, thread, group, ``kill(-1)``, pidfd, ``SIGIO`` owner), limit,
priority or scheduling change, and ``PTRACE_TRACEME``, that would reach the agent or a
process it started itself from anything below them (docs/container.md, "The agent out
of its tools' reach").

Bad input: a missing compiler or a failed build raises :class:`ShieldBuildError` and
leaves no partial file. Nothing here starts an agent; a process that loads the library
and cannot be hidden or guarded exits 126 before its own code runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ...errors import ContainerError

__all__ = [
    "PRELOAD_VAR",
    "ShieldBuildError",
    "build_shield",
    "shield_env",
    "shield_path",
    "shielded",
]

PRELOAD_VAR: Final = "LD_PRELOAD"
_SOURCE: Final = Path(__file__).with_name("shield.c")
_OUTPUT_TAIL: Final = 2000


class ShieldBuildError(ContainerError):
    """The shield library could not be built (``agent_install_failed``)."""

    default_code = "agent_install_failed"


def shield_path(directory: Path) -> Path:
    """Where the shield of this source is in agents dir ``directory`` (built or not)."""
    label = hashlib.sha256(_SOURCE.read_bytes()).hexdigest()[:12]
    return directory / f"shield-{label}.so"


def build_shield(directory: Path) -> Path:
    """Build the shield into ``directory`` unless it is there; return its path. Call it
    under the agents dir's lock. Raises :class:`ShieldBuildError`."""
    path = shield_path(directory)
    if path.is_file():
        return path
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ShieldBuildError(
            "the agents' shield needs a C compiler (cc; Debian: apt-get install gcc)"
        )
    fd, staging = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    os.close(fd)
    try:
        command = [compiler, "-shared", "-fPIC", "-O2", "-o", staging, str(_SOURCE)]
        try:
            done = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
            )
        except OSError as error:
            raise ShieldBuildError(f"the C compiler could not start: {error}") from error
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip()[-_OUTPUT_TAIL:]
            raise ShieldBuildError(f"building the agents' shield failed: {tail}")
        os.chmod(staging, 0o755)
        os.rename(staging, path)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return path


def shield_env(env: Mapping[str, str], shield: Path) -> dict[str, str]:
    """``env`` with ``shield`` first in ``LD_PRELOAD`` (what it preloaded kept after)."""
    preloaded = env.get(PRELOAD_VAR, "")
    return {**env, PRELOAD_VAR: f"{shield} {preloaded}".strip()}


def shielded(env: Mapping[str, str], agents_dir: Path) -> dict[str, str]:
    """``env`` preloading the shield of agents dir ``agents_dir`` when it is built (an
    installed preset's always is: :func:`~.install.installed_command` checks it)."""
    shield = shield_path(agents_dir)
    return shield_env(env, shield) if shield.is_file() else dict(env)
