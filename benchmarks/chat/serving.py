"""The chat benchmarks' server and requests: ``sandstream serve`` as its own process,
and raw HTTP/1.1 ``POST``\\ s to it.

:func:`serve` starts ``sandstream serve --port 0`` (the embedded runner, its durable
sessions and the chat backend, with :data:`API_TOKEN` and :data:`RUNNER_TOKEN`) in a
nursery and returns once it listens; cancelling the nursery terminates it and waits
for it, as long as it takes. It raises :class:`trio.TooSlowError` when the process does
not say where it listens within a minute, and
:class:`~benchmarks.support.server_process.ProcessExited` when it exits first. Its stderr
goes to /dev/null. :func:`post` sends one request on a fresh connection and hands back
the socket, for the caller to read the response from.
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, Final

import msgspec
import trio

from benchmarks.support.server_process import ServerProcess

__all__ = ["API_TOKEN", "LISTENING", "RUNNER_TOKEN", "post", "serve"]

API_TOKEN: Final = "benchmark-api-token"
RUNNER_TOKEN: Final = "benchmark-runner-token"
LISTENING: Final = re.compile(r"listening on (http://\S+)")
"""``sandstream serve``'s line on stdout once it listens; the group is its URL."""


async def serve(
    nursery: trio.Nursery, data_dir: Path, agent_config: Path, *flags: str
) -> ServerProcess:
    """``sandstream serve --port 0 [flags]`` as its own process, once it listens."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SANDSTREAM_", "OPENAI_"))},
        "SANDSTREAM_API_TOKEN": API_TOKEN,
        "SANDSTREAM_RUNNER_TOKEN": RUNNER_TOKEN,
    }
    argv = [
        str(Path(sys.executable).parent / "sandstream"),
        "serve",
        "--port", "0",
        "--data-dir", str(data_dir),
        "--agent-config", str(agent_config),
        "--log-level", "warning",
        *flags,
    ]  # fmt: skip
    return await ServerProcess.start(
        nursery,
        argv,
        listening=LISTENING,
        capture="stdout",
        env=env,
        stop_signal=signal.SIGTERM,
        grace=math.inf,
        deadline=60.0,
    )


async def post(url: str, path: str, token: str, body: Any) -> trio.SocketStream:
    """A raw HTTP/1.1 ``POST`` (``Connection: close``: the response ends at EOF)."""
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    payload = msgspec.json.encode(body)
    await stream.send_all(
        (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        + payload
    )
    return stream
