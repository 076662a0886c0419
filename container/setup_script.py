"""The environment's setup script: run with bash in the work dir, output as ``log`` lines.

The script is written to a private file (not the work dir) and run as
``bash <file>`` with the run's environment, stdin at ``/dev/null``, in its own
process group and its own Landlock domain (:func:`~.landlock.own_domain`: neither it
nor a daemon it leaves can signal or ``ptrace`` the container or the agent). Each
stdout line becomes ``log{level:"info"}`` and each stderr line ``log{level:"warn"}``,
prefixed ``setup: ``. A non-zero exit, a timeout or a script
that cannot start raises :class:`~.errors.SetupError`; on cancellation the script's
process group is terminated and :class:`trio.Cancelled` propagates.
"""

from __future__ import annotations

import subprocess
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from sandstream.core import LogLevel, NDJSONSplitter

from .errors import SetupError
from .output import Emitter
from .procs import KILL_GRACE, run_in_group

__all__ = ["run_setup_script"]

_MAX_LOG_LINE: Final = 16 * 1024
_TAIL_LINES: Final = 5


class _LineLogger:
    """Split a byte stream into lines and log each; remember the last few."""

    def __init__(self, emitter: Emitter, level: LogLevel) -> None:
        self._emitter = emitter
        self._level: LogLevel = level
        self._splitter = NDJSONSplitter(_MAX_LOG_LINE)
        self.tail: deque[str] = deque(maxlen=_TAIL_LINES)

    def feed(self, chunk: bytes) -> None:
        self._log(self._splitter.feed(chunk))

    def close(self) -> None:
        self._log(self._splitter.close())

    def _log(self, lines: list[bytes | None]) -> None:
        for line in lines:
            text = (
                f"[line longer than {_MAX_LOG_LINE} bytes dropped]"
                if line is None
                else line.decode("utf-8", "replace")
            )
            self.tail.append(text)
            self._emitter.log(self._level, f"setup: {text}")


async def run_setup_script(
    script: str,
    *,
    work_dir: Path,
    state_dir: Path,
    env: Mapping[str, str],
    emitter: Emitter,
    timeout: float,
    kill_grace: float = KILL_GRACE,
) -> None:
    """Run ``script`` to completion; raise :class:`SetupError` if it fails.

    An empty (or all-whitespace) script does nothing.
    """
    if not script.strip():
        return
    path = state_dir / "setup.sh"
    path.write_text(script, encoding="utf-8")
    out = _LineLogger(emitter, "info")
    err = _LineLogger(emitter, "warn")
    emitter.log("info", "setup: running setup script")
    try:
        outcome = await run_in_group(
            ["bash", str(path)],
            cwd=work_dir,
            env=env,
            on_stdout=out.feed,
            on_stderr=err.feed,
            timeout=timeout,
            grace=kill_grace,
            confined=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SetupError(f"setup script could not start: {exc}") from exc
    finally:
        out.close()
        err.close()
    if outcome.timed_out:
        raise SetupError(f"setup script timed out after {timeout:g}s")
    if outcome.returncode != 0:
        detail = " | ".join(err.tail) or " | ".join(out.tail)
        raise SetupError(f"setup script {outcome.describe()}" + (f": {detail}" if detail else ""))
    emitter.log("info", "setup: done")
