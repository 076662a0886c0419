"""``python -m sandstream.server.cli runner|serve ARGS``: the two commands by name. An
unknown command is a usage line and exit status 2; a reader that leaves, status 141."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Final

from sandstream.core import exit_quietly_on_broken_pipe

from .runner import runner_main
from .serve import serve_main

__all__ = ["COMMANDS", "main"]

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
