"""``sandstream runner`` as a real subprocess on a loopback port, for tests that kill it.

:func:`start_runner_process` starts it with a data dir and a token and returns it with
its URL once it listens (it reads the process's stderr until then and on, so the pipe
never fills). Stopping it is the caller's: a test that SIGKILLs it waits for it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from sandstream.server.http.auth import TOKEN_ENV

__all__ = ["start_runner_process"]

_RUNNING = re.compile(rb"Running on (http://[\d.]+:\d+)")


async def start_runner_process(
    nursery: trio.Nursery,
    data_dir: Path,
    token: str,
    *options: str,
    wrapper: Sequence[str] = (),
) -> tuple[trio.Process, str]:
    """Start ``sandstream runner --port 0 --data-dir data_dir`` with ``token`` (and
    ``options``), under the command ``wrapper`` if given (``prlimit --fsize=…``);
    return the process and its URL."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env[TOKEN_ENV] = token
    process = await trio.lowlevel.open_process(
        [
            *wrapper,
            sys.executable,
            "-m",
            "sandstream.server.cli",
            "runner",
            "--port",
            "0",
            "--data-dir",
            str(data_dir),
            "--container-stderr",
            "discard",
            *options,
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    stderr = bytearray()
    bound = trio.Event()

    async def read_stderr() -> None:
        assert process.stderr is not None
        async with process.stderr:
            while chunk := await process.stderr.receive_some():
                stderr.extend(chunk)
                if _RUNNING.search(stderr):
                    bound.set()

    nursery.start_soon(read_stderr)
    with trio.fail_after(30):
        await bound.wait()
    match = _RUNNING.search(stderr)
    assert match is not None
    return process, match.group(1).decode()
