"""Running a server process, the same way for ``sandstream runner`` and ``sandstream serve``.

Logging to stderr (the access log as JSON lines), Hypercorn bound to the address asked
for, and :func:`run_server`: it runs the server until it returns (SIGINT/SIGTERM end it
through the command's shutdown trigger) and turns an ``OSError`` such as a port already
in use into one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Awaitable, Callable

import trio
from hypercorn.config import Config

from sandstream.server.http.malloc import keep_large_buffers
from sandstream.server.http.serve import raise_open_file_limit
from sandstream.server.runner.access_log import configure_access_log

__all__ = ["configure_logging", "hypercorn_config", "run_server"]


def configure_logging(level: str) -> None:
    """Log records at ``level`` and up to stderr; the access log as bare JSON lines."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    configure_access_log()


def hypercorn_config(host: str, port: int) -> Config:
    """Hypercorn bound to ``host:port``; its log goes through logging, once per line."""
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.backlog = 1024  # session readers reconnect in bursts (Hypercorn's default: 100)
    config.accesslog = None  # one structured record per turn instead (sandstream.access)
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


def run_server(command: str, config: Config, server: Callable[[], Awaitable[object]]) -> int:
    """``trio.run(server)``; 0 when it ends, 1 with one line on stderr for an ``OSError``.

    First the process is set up for serving: its open-file limit raised, glibc's malloc
    told to keep large buffers. The ``OSError`` may come wrapped in trio's exception
    groups (a port already in use is raised from Hypercorn's nurseries): it is still
    one line, never a traceback. A ``BrokenPipeError`` (stdout's reader left) and
    anything else propagate.
    """
    raise_open_file_limit()
    keep_large_buffers()
    try:
        trio.run(server)
    except (OSError, BaseExceptionGroup) as exc:
        error = _sole_os_error(exc)
        if error is None or isinstance(error, BrokenPipeError):
            raise
        if error.errno == errno.EADDRINUSE:
            print(f"{command}: {', '.join(config.bind)} is already in use", file=sys.stderr)
        else:
            print(f"{command}: {error}", file=sys.stderr)
        return 1
    return 0


def _sole_os_error(exc: BaseException) -> OSError | None:
    """The first ``OSError`` in ``exc`` if every exception in it is one, else ``None``."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup) and exc.split(OSError)[1] is None:
        return _sole_os_error(exc.exceptions[0])
    return None
