"""What every ``sandstream`` command shares: the truth about a command that cannot be
imported, and a quiet end when stdout's reader goes away.

:func:`load_failure` is the one line for a command whose module cannot be imported: the
extra to install when a distribution that extra requires is not installed (by the
installation's metadata, never by the error's text), else the import failure itself.
:func:`exit_quietly_on_broken_pipe` runs a command and turns a reader that left
(``… | head``) into exit status :data:`EXIT_BROKEN_PIPE`, without a traceback.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from importlib.metadata import Distribution

__all__ = [
    "EXIT_BROKEN_PIPE",
    "exit_quietly_on_broken_pipe",
    "load_failure",
    "missing_requirements",
]

EXIT_BROKEN_PIPE: Final = 128 + signal.SIGPIPE


def load_failure(
    command: str,
    extra: str | None,
    exc: ModuleNotFoundError,
    dist: Distribution | None = None,
) -> str:
    """The one line that tells the user of ``command`` why it could not be imported.

    ``extra`` is the extra ``command`` comes with, of the distribution ``dist``
    (default: this one). When some distribution that extra requires is not installed
    (by the installation's metadata, never by the error's text), the line names the
    extra to install; otherwise (the extra is installed, or there is none) it is the
    import failure itself.
    """
    from importlib.metadata import PackageNotFoundError, distribution  # zipfile, threading

    if dist is None:
        try:
            dist = distribution("sandstream")
        except PackageNotFoundError:  # a bare checkout: no metadata to ask
            dist = None
    missing = [] if extra is None else missing_requirements(dist, extra)
    if extra is None or (dist is not None and not missing):
        return f"{command}: cannot be loaded: {type(exc).__name__}: {exc}"
    lacking = f"; {', '.join(missing)} not installed" if missing else ""
    return (
        f"{command}: needs the {extra!r} extra ({exc}{lacking}); install it from a "
        f"checkout with: pip install '/path/to/sandstream[{extra}]'"
    )


_ONLY_EXTRA: Final = r"""\s*extra\s*==\s*["']{}["']\s*"""


def missing_requirements(dist: Distribution | None, extra: str) -> list[str]:
    """The distributions ``dist`` requires for ``extra`` alone that are not installed.

    A requirement with a marker beyond ``extra == ...`` (a platform's) is not counted:
    without evaluating markers, it may not be meant for this machine.
    """
    from importlib.metadata import PackageNotFoundError, distribution  # zipfile, threading

    only_extra = re.compile(_ONLY_EXTRA.format(re.escape(extra)))
    missing: list[str] = []
    for requirement in (dist.requires or []) if dist is not None else []:
        spec, _, marker = requirement.partition(";")
        if only_extra.fullmatch(marker) is None:
            continue
        name = re.split(r"[\s\[<>=!~;(]", spec.strip(), maxsplit=1)[0]
        try:
            distribution(name)
        except PackageNotFoundError:
            missing.append(name)
    return missing


def exit_quietly_on_broken_pipe(run: Callable[[], int]) -> int:
    """``run()``, or :data:`EXIT_BROKEN_PIPE` without a traceback if stdout's reader left.

    Also when the ``BrokenPipeError`` comes wrapped in exception groups (a trio
    nursery). Stdout is pointed at ``/dev/null`` so that the interpreter's final
    flush cannot fail again.
    """
    try:
        return run()
    except BrokenPipeError:
        pass
    except BaseExceptionGroup as group:
        if group.split(BrokenPipeError)[1] is not None:
            raise
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE
