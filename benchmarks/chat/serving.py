"""The chat benchmarks' server and requests: ``sandstream serve`` as its own process,
and raw HTTP/1.1 ``POST``\\ s to it.

:func:`serve` starts ``sandstream serve --port 0`` (the embedded runner, its durable
sessions and the chat backend, with :data:`API_TOKEN` and :data:`RUNNER_TOKEN`) in a
nursery and returns once it listens; cancelling the nursery terminates it and waits
for it. It raises :class:`trio.TooSlowError` when the process does not say where it
listens within a minute. :func:`post` sends one request on a fresh connection and
hands back the socket, for the caller to read the response from.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
import trio

__all__ = ["API_TOKEN", "RUNNER_TOKEN", "Served", "post", "serve"]

API_TOKEN: Final = "benchmark-api-token"
RUNNER_TOKEN: Final = "benchmark-runner-token"


@dataclass(frozen=True)
class Served:
    """A ``sandstream serve`` process: its URL and its pid."""

    url: str
    pid: int


async def serve(nursery: trio.Nursery, data_dir: Path, agent_config: Path, *flags: str) -> Served:
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
    process = await trio.lowlevel.open_process(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    found = trio.Event()
    url: list[str] = []

    async def read() -> None:
        assert process.stdout is not None
        pending = b""
        async for chunk in process.stdout:
            pending += chunk
            if not url and b"listening on " in pending:
                line = pending.split(b"listening on ", 1)[1]
                if b" " in line:
                    url.append(line.split()[0].decode().rstrip("/"))
                    found.set()

    async def supervise() -> None:
        try:
            async with trio.open_nursery() as inner:
                inner.start_soon(read)
                await process.wait()
        finally:
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    process.terminate()
                    await process.wait()

    nursery.start_soon(supervise)
    with trio.fail_after(60):
        await found.wait()
    return Served(url[0], process.pid)


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
