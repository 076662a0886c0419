"""Serving an app on Hypercorn's trio worker, with a shutdown that drains it first.

Hypercorn's own graceful shutdown waits ``graceful_timeout`` for open connections and
then cancels them, so a live stream would end without a terminal line. :func:`serve`
puts the role's ``drain`` *inside* the trigger: when ``shutdown_trigger`` returns,
``drain`` runs (the runner ends every live turn with ``error{code:"shutdown"}``, reaps
its container and delivers its last line; the chat backend also settles its turns);
only then does Hypercorn stop. Each role's ``after_serving`` hook drains again (a
no-op by then) in case the app is served some other way.

Every WebSocket this server serves is read-only (a session's ``/ws``): :func:`serve`
bounds a client message to :data:`MAX_WEBSOCKET_MESSAGE` bytes, so that Hypercorn
closes a socket sent more with 1009 instead of buffering up to its 16 MiB default.
"""

from __future__ import annotations

import logging
import resource
import signal
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Final

import hypercorn.trio
import trio
from hypercorn.config import Config
from quart import Quart

from .protocol_errors import install_protocol_problems

__all__ = ["MAX_WEBSOCKET_MESSAGE", "raise_open_file_limit", "serve", "shutdown_signals"]

MAX_WEBSOCKET_MESSAGE: Final = 4096
"""Bytes of one client WebSocket message Hypercorn buffers (more: closed with 1009)."""

log = logging.getLogger("sandstream.runner")


def raise_open_file_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; return the soft limit.

    Every connection is a file descriptor, and so are a turn's pipes: at a common
    default soft limit of 1024, a thousand idle connections leave no descriptor to
    start a container with (``launch_failed: Too many open files``). The hard limit
    is what the process is allowed; a limit that cannot be raised is left as it is.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open file limit from %d to %d: %s", soft, target, exc)
        return soft
    return target


@contextmanager
def shutdown_signals(*signums: int) -> Iterator[Callable[[], Awaitable[None]]]:
    """Catch ``signums`` (default SIGINT, SIGTERM) from now on; yields the shutdown
    trigger, which returns at the first of them, even one that came before it was
    awaited. Entered before the server starts, a signal sent as soon as it says where
    it listens ends it gracefully rather than killing the process. Trio's main thread
    only."""
    with trio.open_signal_receiver(*(signums or (signal.SIGINT, signal.SIGTERM))) as received:

        async def first_signal() -> None:
            async for signum in received:
                log.info("received %s: shutting down", signal.Signals(signum).name)
                return

        yield first_signal


async def serve(
    app: Quart,
    config: Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    drain: Callable[[], Awaitable[object]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns (default: never), then ``drain``.

    ``task_status.started`` gets the bound addresses (``["http://127.0.0.1:43117"]``),
    so ``await nursery.start(serve, app, config)`` works with port 0. Cancellation:
    Hypercorn stops at once; each turn's container is still stopped and reaped (the
    turn's teardown is shielded), but clients get no terminal line. Requests Hypercorn
    rejects itself are answered with problem JSON (:mod:`.protocol_errors`). A client
    WebSocket message is bounded to :data:`MAX_WEBSOCKET_MESSAGE` bytes (``config``'s
    ``websocket_max_message_size`` is lowered to it).
    """
    install_protocol_problems()
    config.websocket_max_message_size = min(
        config.websocket_max_message_size, MAX_WEBSOCKET_MESSAGE
    )

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        if drain is not None:
            await drain()

    await hypercorn.trio.serve(app, config, shutdown_trigger=trigger, task_status=task_status)
