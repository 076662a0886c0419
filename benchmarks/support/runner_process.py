"""``sandstream runner`` as a real subprocess on a free loopback port, for the tests and
benchmarks that run it apart (to kill it, restart it, measure it, read its log).

::

    runner = await start_runner_process(nursery, "--data-dir", str(data_dir), token=TOKEN)
    runner.url, runner.pid, runner.records()            # its address, its access log

Its stderr (its log: JSON lines, as it is no terminal) is kept, line by line; it
returns once the runner says where it listens. Cancelling the nursery stops it with
``SIGTERM`` (its real shutdown path), ``SIGKILL`` after a grace period
(:class:`~benchmarks.support.server_process.ServerProcess`, which also says what is
raised when it exits first).
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
import trio

from benchmarks.support.server_process import ServerProcess
from sandstream.server.http.auth import TOKEN_ENV

__all__ = ["RUNNING", "RunnerProcess", "start_runner_process"]

RUNNING: Final = re.compile(r"Running on (http://[^\s\"]+)")
"""Hypercorn's line for each address it listens on; the group is the URL."""
_DEADLINE: Final = 60.0
"""Seconds to start, or to stop after ``SIGTERM``, on a loaded CI machine."""


class RunnerProcess(ServerProcess):
    """A running ``sandstream runner``."""

    def records(self) -> list[dict[str, Any]]:
        """Its access-log records so far, one a turn (its log in JSON lines)."""
        logged = [msgspec.json.decode(line) for line in self.stderr if line]
        return [record for record in logged if record.get("event") == "turn"]


async def start_runner_process(
    nursery: trio.Nursery,
    *args: str,
    token: str,
    env: Mapping[str, str] | None = None,
    wrapper: Sequence[str] = (),
) -> RunnerProcess:
    """``sandstream runner --port 0 ARGS`` with ``token`` in ``env`` (default: this
    process's environment), under the command ``wrapper`` if given (``prlimit …``);
    return it once it listens."""
    argv = [*wrapper, sys.executable, "-m", "sandstream.server.cli", "runner", "--port", "0"]
    return await RunnerProcess.start(
        nursery,
        [*argv, *args],
        listening=RUNNING,
        capture="stderr",
        env={**(os.environ if env is None else env), TOKEN_ENV: token},
        stop_signal=signal.SIGTERM,
        grace=_DEADLINE,
        deadline=_DEADLINE,
    )
