"""A real ``redis-server`` (Debian's package) on a free loopback port, for one test or
benchmark.

::

    async with open_redis_server() as redis:   # started, answering PING
        lease = RedisLease(RedisClient(redis.url))
    # stopped (SIGTERM, then SIGKILL), its temp dir removed

Nothing is persisted (no RDB, no AOF); its working directory is a temp dir of its own.
A port taken by someone else between the pick and the bind is retried with another.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

__all__ = ["RedisServer", "open_redis_server"]

_ATTEMPTS = 5


@dataclass(frozen=True)
class RedisServer:
    """A running redis-server: its URL (``redis://127.0.0.1:PORT/0``), port and process."""

    url: str
    port: int
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _answers_ping(port: int, process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Poll until the server answers PING (True; ``-NOAUTH`` counts: it needs a
    password) or exits (False); fail at ``timeout``."""
    with trio.fail_after(timeout):
        while process.poll() is None:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.01)
                continue
            async with stream:
                await stream.send_all(b"PING\r\n")
                reply = b""
                while not reply.endswith(b"\r\n"):
                    data = await stream.receive_some(64)
                    if not data:
                        break
                    reply += data
            if reply == b"+PONG\r\n" or reply.startswith(b"-NOAUTH"):
                return True
            await trio.sleep(0.01)
    return False


@asynccontextmanager
async def open_redis_server(*options: str, timeout: float = 20.0) -> AsyncIterator[RedisServer]:
    """Start ``redis-server`` on 127.0.0.1 and a free port, with ``options`` added to
    its command line (``"--requirepass", "secret"``); stop it and remove its temp dir
    when the block ends. Raises :class:`RuntimeError` if it does not start."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
    workdir = Path(tempfile.mkdtemp(prefix="sandstream-redis-"))
    process: subprocess.Popen[bytes] | None = None
    try:
        for _ in range(_ATTEMPTS):
            port = _free_port()
            process = subprocess.Popen(
                [
                    binary,
                    "--bind", "127.0.0.1",
                    "--port", str(port),
                    "--dir", str(workdir),
                    "--save", "",
                    "--appendonly", "no",
                    "--daemonize", "no",
                    "--loglevel", "warning",
                    *options,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if await _answers_ping(port, process, timeout):
                break
            process.wait()
        else:
            raise RuntimeError(f"redis-server did not start in {_ATTEMPTS} attempts")
        yield RedisServer(url=f"redis://127.0.0.1:{port}/0", port=port, process=process)
    finally:
        if process is not None and process.poll() is None:
            process.terminate()
            with trio.CancelScope(shield=True):
                try:
                    await trio.to_thread.run_sync(process.wait, 10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
