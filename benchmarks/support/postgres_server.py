"""A real PostgreSQL server (Debian's ``postgresql`` package) in a temp dir, for a test
session or a benchmark.

::

    with open_postgres_server() as server:        # initdb'd, started, answering
        url = server.create_database()            # a fresh database, from the template
        store = await PostgresChatStore.open(url)
    # stopped (fast shutdown, then SIGKILL), its temp dir removed

The cluster lives in a temp dir of its own (under ``/tmp``, which the ``postgres``
user can reach: a test's own temp dirs are private to root), listens on 127.0.0.1 and
a free port (and a unix socket in that dir), trusts local logins as ``sandstream`` and
skips fsync (a test's data need not survive a crash). ``initdb`` and ``postgres``
refuse to run as root: as root they run as the ``postgres`` user Debian creates, who
then owns the temp dir. :meth:`PostgresServer.create_database` copies a template
database (``CREATE DATABASE … TEMPLATE``, a file copy: much faster than creating one
empty). A port taken by someone else between the pick and the bind is retried with
another.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.support.ports import free_port

__all__ = ["PostgresServer", "open_postgres_server", "postgres_binary"]

_ATTEMPTS = 5
_USER = "sandstream"
_TEMPLATE = "sandstream_template"
_UNSAFE = ("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
"""Settings for tests: a test's data need not survive a crash."""


def postgres_binary(name: str) -> str:
    """The path of PostgreSQL's program ``name`` (Debian keeps them under
    ``/usr/lib/postgresql/<version>/bin``, the newest version wins). Raises
    :class:`RuntimeError` if PostgreSQL is not installed."""
    found = sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if found:
        return str(found[-1])
    on_path = shutil.which(name)
    if on_path is None:
        raise RuntimeError(f"{name} is not installed (Debian: apt-get install postgresql)")
    return on_path


def _as_postgres() -> dict[str, Any]:
    """Popen arguments that run a program as the ``postgres`` user when we are root."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


@dataclass
class PostgresServer:
    """A running PostgreSQL server: its port, process and temp dir."""

    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    command: list[str] = field(default_factory=list)
    """The server's command line (its data dir, its port), to start it again."""
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def stop(self) -> None:
        """Stop the server (a fast shutdown: its clients' sessions end). Blocking."""
        _stop(self.process)

    def start(self, timeout: float = 60.0) -> None:
        """Start the stopped server again on its data dir and port; return once it
        takes a connection. Blocking. Raises :class:`RuntimeError` if it exits."""
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **_as_postgres()
        )
        if not _wait_until_ready(self.url(), self.process, timeout):
            raise RuntimeError("PostgreSQL did not start again")

    def url(self, database: str = "postgres") -> str:
        """The URL of ``database`` on this server."""
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database (a copy of the template); returns its URL."""
        name = f"test_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {_TEMPLATE}')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database of ``url`` (its connections are ended first)."""
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def terminate_connections(self, url: str) -> int:
        """End every connection to the database of ``url`` (as a server restart or a
        network failure would); returns how many."""
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchall()
        return len(rows)


def _wait_until_ready(url: str, process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Poll until the server takes a connection (True) or exits (False); raise
    :class:`TimeoutError` at ``timeout``."""
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        try:
            with psycopg.connect(url, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL did not start in {timeout} s") from None
            time.sleep(0.02)
    return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)  # fast shutdown: ends the clients' sessions
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def open_postgres_server(
    timeout: float = 60.0, parent: Path = Path("/tmp"), *, durable: bool = False
) -> Iterator[PostgresServer]:
    """Create a cluster in a temp dir, start it, make the template database; stop it
    and remove the temp dir (in ``parent``) when the block ends. Blocking (a sync fixture's, or a
    benchmark's before its trio run). ``durable``: PostgreSQL's own defaults (fsync,
    synchronous commits), as a deployment runs it, instead of the tests' settings.
    Raises :class:`RuntimeError` if it does not start."""
    initdb, postgres = postgres_binary("initdb"), postgres_binary("postgres")
    workdir = Path(tempfile.mkdtemp(prefix="sandstream-postgres-", dir=parent))
    process: subprocess.Popen[bytes] | None = None
    server: PostgresServer | None = None
    try:
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(workdir, owner.pw_uid, owner.pw_gid)
        data = workdir / "data"
        subprocess.run(
            [initdb, "-D", str(data), "-U", _USER, "--auth=trust", "-E", "UTF8", "--no-sync",
             "--locale=C.UTF-8"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            **_as_postgres(),
        )  # fmt: skip
        for _ in range(_ATTEMPTS):
            port = free_port()
            command = [
                postgres, "-D", str(data), "-p", str(port), "-k", str(workdir),
                "-c", "listen_addresses=127.0.0.1", *([] if durable else _UNSAFE),
                "-c", "max_connections=300", "-c", "shared_buffers=32MB",
            ]  # fmt: skip
            process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **_as_postgres()
            )
            server = PostgresServer(port=port, process=process, workdir=workdir, command=command)
            if _wait_until_ready(server.url(), process, timeout):
                break
            process.wait()
        else:
            raise RuntimeError(f"PostgreSQL did not start in {_ATTEMPTS} attempts")
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {_TEMPLATE}")
        yield server
    finally:
        if process is not None:
            _stop(process)
        if server is not None and server.process is not process:  # started again
            _stop(server.process)
        shutil.rmtree(workdir, ignore_errors=True)
