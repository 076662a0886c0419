"""The Node reference server of Durable Streams (``@durable-streams/server``) as a real
subprocess on a free loopback port, for comparison with sandstream's.

::

    server = await start_reference_server(nursery, node, data_dir)
    server.url                                             # http://127.0.0.1:PORT

The server is tests/node/durable_streams/reference_server.mjs (where tests/node's npm
packages are), file-backed in ``data_dir``, or in memory without one. It runs until
``nursery`` is cancelled or :meth:`~benchmarks.support.server_process.ServerProcess.stop`,
then stops: SIGTERM (it closes its live connections), SIGKILL after a grace period. Its
output (stdout and stderr, merged) is read as long as it runs and shown in the error
raised when it exits before it listens.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Final

import trio

from benchmarks.support.server_process import ServerProcess

__all__ = ["NODE_DIR", "start_reference_server"]

NODE_DIR: Final = Path(__file__).resolve().parents[2] / "tests" / "node"
_SCRIPT: Final = NODE_DIR / "durable_streams" / "reference_server.mjs"
_LISTENING: Final = re.compile(r'^\{"url":\s*"([^"]+)"')
"""The line it prints once it listens: ``{"url": ...}``."""
_DEADLINE: Final = 30.0
"""Seconds to start or to stop, on a loaded CI machine."""


async def start_reference_server(
    nursery: trio.Nursery,
    node: Path,
    data_dir: Path | None,
    *,
    long_poll_timeout_ms: int | None = 500,
) -> ServerProcess:
    """Serve the reference server with its data in ``data_dir`` (``None``: in memory) as
    long as ``nursery`` runs; return it once it listens.

    ``long_poll_timeout_ms``: how long a live long-poll waits for data (the reference's
    own conformance run uses 500 ms; ``None``: its default, 30 s).
    """
    options: dict[str, object] = {"port": 0}
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        options["dataDir"] = str(data_dir)
    if long_poll_timeout_ms is not None:
        options["longPollTimeout"] = long_poll_timeout_ms
    return await ServerProcess.start(
        nursery,
        [str(node), str(_SCRIPT), json.dumps(options)],
        listening=_LISTENING,
        capture="merged",
        cwd=NODE_DIR,
        stop_signal=signal.SIGTERM,
        grace=_DEADLINE,
        deadline=_DEADLINE,
    )
