"""The server's command lines, ``sandstream runner`` and ``sandstream serve``, in one place.

- :mod:`.options`: the flags both share (sandbox and container, sessions, body timeout)
  and the launcher and settings they build;
- :mod:`.running`: logging, Hypercorn's config, and running the server with an
  ``OSError`` (a port in use) as one line and exit status 1;
- :mod:`.runner`, :mod:`.serve`: each command's flags and ``main``.

The ``sandstream`` script finds both through the ``sandstream.commands`` entry points;
``python -m sandstream.server.cli runner|serve ...`` runs them without it (:func:`main`).
Flags and environment variables: docs/configuration.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Final

from sandstream.core.cli import exit_quietly_on_broken_pipe

from .options import (
    add_container_arguments,
    add_session_arguments,
    launcher_from_args,
    session_settings,
)
from .runner import build_runner_parser, runner_main
from .running import hypercorn_config
from .serve import build_serve_parser, serve_main

__all__ = [
    "add_container_arguments",
    "add_session_arguments",
    "build_runner_parser",
    "build_serve_parser",
    "hypercorn_config",
    "launcher_from_args",
    "main",
    "runner_main",
    "serve_main",
    "session_settings",
]

COMMANDS: Final[dict[str, Callable[[Sequence[str]], int]]] = {
    "runner": runner_main,
    "serve": serve_main,
}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sandstream.server.cli runner|serve ARGS``; 2 on an unknown command."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print("usage: python -m sandstream.server.cli {runner,serve} ...", file=sys.stderr)
        return 2
    return exit_quietly_on_broken_pipe(partial(COMMANDS[args[0]], args[1:]))
