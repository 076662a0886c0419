"""Skill ``run_shell``: run a bash command in the work dir with a timeout.

The command's output goes to temporary files, not pipes, so a background process it
leaves behind can never block this skill. On timeout the command and everything else
in this skill's process group are terminated (the container starts each skill as a
process group leader, and kills the whole group when the skill exits anyway).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from container.builtin_skills._skilllib import fail, read_args, reply, work_dir
else:  # run as a script: the skill's folder is sys.path[0]
    from _skilllib import fail, read_args, reply, work_dir

_MAX_TIMEOUT = 600.0


def _tail(handle: IO[bytes], limit: int) -> tuple[str, bool]:
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(max(0, size - limit))
    return handle.read().decode("utf-8", "replace"), size > limit


def _stop_group() -> None:
    if os.getpgrp() != os.getpid():
        return  # not started as a group leader: leave other processes alone
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)


def main() -> None:
    args = read_args()
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        fail("command must be a non-empty string")
    timeout = min(float(args.get("timeout_sec", 30)), _MAX_TIMEOUT)
    limit = int(args.get("max_output_bytes", 64 * 1024))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=work_dir(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        try:
            exit_code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            _stop_group()
            stderr, _ = _tail(err, 2000)
            fail(f"command timed out after {timeout:g}s\n{stderr}".rstrip())
        stdout, stdout_truncated = _tail(out, limit)
        stderr, stderr_truncated = _tail(err, limit)
    reply(
        {
            "exit_code": exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "stdout_truncated": stdout_truncated,
            "stderr_truncated": stderr_truncated,
        }
    )


if __name__ == "__main__":
    main()
