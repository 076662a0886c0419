"""Running a server process, the same way for ``sandstream runner`` and ``sandstream serve``.

Hypercorn bound to the address asked for (its error log through the server's log,
:mod:`.logs`); :func:`serve_with_metrics`, the metrics' own listener beside the server
(``--metrics-bind``); and :func:`run_server`: it runs the server until it returns
(SIGINT/SIGTERM end it through the command's shutdown trigger) and turns an ``OSError``
such as a port already in use into one line on stderr and exit status 1, never a
traceback.
"""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Awaitable, Callable
from functools import partial

import hypercorn.trio
import trio
from hypercorn.config import Config
from quart_trio import QuartTrio

from sandstream.server.app import create_metrics_app
from sandstream.server.http import keep_large_buffers, raise_open_file_limit

__all__ = ["hypercorn_config", "run_server", "serve_with_metrics"]

log = logging.getLogger("sandstream.server")


def hypercorn_config(host: str, port: int) -> Config:
    """Hypercorn bound to ``host:port``; its log goes through logging, once per line."""
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.backlog = 1024  # session readers reconnect in bursts (Hypercorn's default: 100)
    config.accesslog = None  # one structured record per turn instead (sandstream.access)
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


async def serve_with_metrics(
    serve: Callable[..., Awaitable[object]],
    app: QuartTrio,
    metrics_bind: tuple[str, int] | None,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``serve(task_status=...)`` (``app``'s server); with ``metrics_bind``, once it
    listens, ``app``'s metrics alone on that address (:func:`create_metrics_app`) until
    ``serve`` returns. ``task_status.started`` gets ``serve``'s addresses.
    Cancellation: both stop at once."""
    async with trio.open_nursery() as nursery:

        async def main(*, task_status: trio.TaskStatus[list[str]]) -> None:
            try:
                await serve(task_status=task_status)
            finally:
                nursery.cancel_scope.cancel()

        binds: list[str] = await nursery.start(main)
        if metrics_bind is not None:
            config = hypercorn_config(*metrics_bind)
            metrics: list[str] = await nursery.start(
                partial(hypercorn.trio.serve, create_metrics_app(app), config)
            )
            log.info("metrics on %s/metrics (no token)", metrics[0].rstrip("/"))
        task_status.started(binds)


def run_server(
    command: str,
    config: Config,
    server: Callable[[], Awaitable[object]],
    *,
    metrics_bind: tuple[str, int] | None = None,
) -> int:
    """``trio.run(server)``; 0 when it ends, 1 with one line on stderr for an ``OSError``
    (``metrics_bind`` is named with ``config``'s address for a port in use).

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
            binds = list(config.bind)
            if metrics_bind is not None:
                binds += hypercorn_config(*metrics_bind).bind
            print(f"{command}: {' or '.join(binds)} is already in use", file=sys.stderr)
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
