"""A real ``redis-server`` (Debian's package) on a free loopback port, for one test or
benchmark.

::

    async with open_redis_server() as redis:   # started, answering PING
        ...                                    # redis.url: redis://127.0.0.1:PORT/0
        await redis.restart()                  # SIGKILLed, started again on its port
    # stopped (SIGTERM, then SIGKILL), its temp dir removed

Nothing is persisted (no RDB, no AOF): a restart starts empty. Its working directory
is a temp dir of its own. A port taken by someone else between the pick and the bind
is retried with another. ``tls=`` (:func:`make_tls_files`: a throwaway CA and a
certificate for 127.0.0.1, made with ``openssl``) serves TLS only, ``rediss://``.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import trio

from benchmarks.support.ports import free_port

__all__ = ["RedisServer", "TlsFiles", "make_tls_files", "open_redis_server"]

_ATTEMPTS = 5


@dataclass(frozen=True)
class TlsFiles:
    """A CA, a server certificate for 127.0.0.1 (and the host names asked for) and a
    client certificate it signed (PEM files; keys unencrypted)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls_files(directory: Path, *, host_names: tuple[str, ...] = ()) -> TlsFiles:
    """A throwaway CA and certificates in ``directory`` for 127.0.0.1 and ``host_names``,
    made with ``openssl`` (blocking: a few processes). Raises
    :class:`subprocess.CalledProcessError`."""

    def openssl(*args: str | Path) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)

    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    openssl("req", "-x509", *key, "-keyout", ca_key, "-out", ca, "-days", "2",
            "-subj", "/CN=sandstream test CA")  # fmt: skip
    extensions = directory / "san.cnf"
    names = ",".join(["IP:127.0.0.1", *(f"DNS:{name}" for name in host_names)])
    extensions.write_text(f"subjectAltName={names}\n")
    for name in ("server", "client"):
        request = directory / f"{name}.csr"
        openssl("req", *key, "-keyout", directory / f"{name}.key", "-out", request,
                "-subj", f"/CN=sandstream test {name}")  # fmt: skip
        openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key,
                "-CAcreateserial", "-out", directory / f"{name}.pem", "-days", "2",
                "-extfile", extensions)  # fmt: skip
    return TlsFiles(
        ca=ca,
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )


class RedisServer:
    """A running redis-server: its URL (``redis://127.0.0.1:PORT/0``, or
    ``rediss://…?ssl_ca_certs=…`` with TLS), port and process."""

    def __init__(self, binary: str, workdir: Path, options: Sequence[str], tls: TlsFiles | None):
        self.url = ""
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._binary = binary
        self._workdir = workdir
        self._options = tuple(options)
        self._tls = tls

    async def start(self, timeout: float) -> None:
        """Start on a free port (on this one, if it has one). Raises
        :class:`RuntimeError` if it does not start."""
        for _ in range(_ATTEMPTS):
            port = self.port or free_port()
            self.process = subprocess.Popen(
                [self._binary, *self._arguments(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if await _answers_ping(port, self.process, timeout, self._client_context()):
                break
            self.process.wait()
        else:
            raise RuntimeError(f"redis-server did not start in {_ATTEMPTS} attempts")
        self.port = port
        if self._tls is None:
            self.url = f"redis://127.0.0.1:{port}/0"
        else:
            ca = quote(str(self._tls.ca))
            self.url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"

    async def restart(self, timeout: float = 20.0) -> None:
        """Kill the server (SIGKILL: what it held is gone) and start it again on its
        port."""
        await self.stop(kill=True)
        await self.start(timeout)

    async def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGTERM, SIGKILL after 10 s; SIGKILL at once if ``kill``)."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        with trio.CancelScope(shield=True):
            try:
                await trio.to_thread.run_sync(process.wait, 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _arguments(self, port: int) -> list[str]:
        ports = ["--port", str(port)]
        if self._tls is not None:
            tls = self._tls
            ports = [
                "--port", "0",
                "--tls-port", str(port),
                "--tls-cert-file", str(tls.server_cert),
                "--tls-key-file", str(tls.server_key),
                "--tls-ca-cert-file", str(tls.ca),
                "--tls-auth-clients", "optional",
            ]  # fmt: skip
        return [
            "--bind", "127.0.0.1",
            *ports,
            "--dir", str(self._workdir),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--loglevel", "warning",
            *self._options,
        ]  # fmt: skip

    def _client_context(self) -> ssl.SSLContext | None:
        if self._tls is None:
            return None
        context = ssl.create_default_context(cafile=str(self._tls.ca))
        context.load_cert_chain(self._tls.client_cert, self._tls.client_key)
        return context


async def _answers_ping(
    port: int, process: subprocess.Popen[bytes], timeout: float, tls: ssl.SSLContext | None
) -> bool:
    """Poll until the server answers PING (True; ``-NOAUTH`` counts: it needs a
    password) or exits (False); fail at ``timeout``."""
    with trio.fail_after(timeout):
        while process.poll() is None:
            try:
                stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", port)
                if tls is not None:
                    stream = trio.SSLStream(stream, tls, server_hostname="127.0.0.1")
                async with stream:
                    await stream.send_all(b"PING\r\n")
                    reply = b""
                    while not reply.endswith(b"\r\n"):
                        data = await stream.receive_some(64)
                        if not data:
                            break
                        reply += data
            except (OSError, trio.BrokenResourceError):
                await trio.sleep(0.01)
                continue
            if reply == b"+PONG\r\n" or reply.startswith(b"-NOAUTH"):
                return True
            await trio.sleep(0.01)
    return False


@asynccontextmanager
async def open_redis_server(
    *options: str, tls: TlsFiles | None = None, timeout: float = 20.0
) -> AsyncIterator[RedisServer]:
    """Start ``redis-server`` on 127.0.0.1 and a free port, with ``options`` added to
    its command line (``"--requirepass", "secret"``), TLS only with ``tls``; stop it
    and remove its temp dir when the block ends. Raises :class:`RuntimeError` if it
    does not start."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
    workdir = Path(tempfile.mkdtemp(prefix="sandstream-redis-"))
    server = RedisServer(binary, workdir, options, tls)
    try:
        await server.start(timeout)
        yield server
    finally:
        await server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
