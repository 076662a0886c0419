"""``python -m sandstream.container`` / ``sandstream container``: run one dispatch.

Reads the dispatch JSON from stdin (or ``--dispatch FILE``; stdin framing in
:mod:`.dispatch`: user messages may follow it there, :mod:`.inbox`), runs it, and exits 0
after ``result``, 1 after ``error``, 2 for an invalid dispatch, ``128 + signum`` when
cancelled by SIGTERM/SIGINT. Stdout carries only envelope lines: the container keeps
a private copy of fd 1 for them and points fd 1 (and ``sys.stdout``) at stderr, so a
stray ``print`` can never corrupt the stream. Heavy imports happen after the signal
handlers are in place, so a SIGTERM at any moment still ends with a terminal line.
Before it reads the dispatch the container makes itself non-dumpable
(:func:`~.procs.hide_from_children`): what it runs cannot read the dispatch's tokens
from its memory nor write into its stdout through ``/proc``.

``--warm``: started ahead of its turn (a runner's warm pool). Once its imports are done
(also those its HTTP client would make at its first request, :func:`~.http.preload`) it
writes :data:`~sandstream.core.schemas.WARM_READY` on stdout, then waits for its binding
line on stdin (the turn's environment variables, put into its environment and so into
what it runs; :func:`~.dispatch.read_binding`), and only then for the dispatch. A signal
while it waits ends it as one while it waits for the dispatch does.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import signal
import sys
import traceback
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Final

from .huge_pages import collapse_heap, forget_heap_tunables

if TYPE_CHECKING:
    from .run import RunOptions

__all__ = ["HELP", "build_parser", "main", "options_from_args"]

HELP: Final = "run one sandbox dispatch"
"""The command's line in ``sandstream --help``."""
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _EarlySignals:
    """Record SIGTERM/SIGINT outside trio's signal receiver (before and after it).

    While ``raising`` is set (only while blocked reading the dispatch), a signal also
    interrupts at once with :class:`_Interrupted`.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self.raising = False
        self._previous = {sig: signal.signal(sig, self._handle) for sig in _SIGNALS}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.raising:
            self.raising = False
            raise _Interrupted(signum)

    def interrupt_if_received(self) -> None:
        """Raise :class:`_Interrupted` for a signal already received."""
        if self.received:
            raise _Interrupted(self.received[0])

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (``main`` parses with it)."""
    parser = argparse.ArgumentParser(
        prog="sandstream container",
        description="Run one sandbox dispatch and stream its NDJSON envelope on stdout.",
    )
    parser.add_argument(
        "--dispatch",
        metavar="FILE",
        help="read the dispatch JSON from FILE instead of stdin ('-' for stdin)",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="started ahead of its turn: say ready on stdout once loaded, then read a "
        "binding line (the turn's environment) on stdin before the dispatch",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        metavar="DIR",
        help="the run's work dir (default: a fresh temporary dir, removed afterwards)",
    )
    parser.add_argument(
        "--keep-work-dir", action="store_true", help="do not remove the temporary work dir"
    )
    parser.add_argument(
        "--skills-dir",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="an extra skills folder with a manifest.json (repeatable)",
    )
    parser.add_argument(
        "--max-runtime",
        type=float,
        metavar="SEC",
        help="cap the run at SEC seconds (below the config's max_runtime_sec)",
    )
    parser.add_argument(
        "--http-timeout",
        type=float,
        default=30.0,
        metavar="SEC",
        help="timeout of each workspace request (default 30)",
    )
    parser.add_argument(
        "--connect-retries",
        type=int,
        default=3,
        metavar="N",
        help="retries of a model request that could not connect (default 3)",
    )
    parser.add_argument(
        "--callback-retry",
        type=_non_negative,
        default=60.0,
        metavar="SEC",
        help="how long a workspace callback that got no answer, or a 502/503/504, is "
        "retried (default 60)",
    )
    parser.add_argument(
        "--retry-backoff",
        type=float,
        default=0.25,
        metavar="SEC",
        help="first backoff between retries, doubling (default 0.25)",
    )
    return parser


def options_from_args(args: argparse.Namespace, *, handle_signals: bool = True) -> RunOptions:
    """The :class:`~.run.RunOptions` for parsed command-line arguments."""
    from .http import HttpSettings
    from .run import RunOptions

    return RunOptions(
        work_dir=args.work_dir,
        keep_work_dir=args.keep_work_dir,
        skill_dirs=tuple(path.resolve() for path in args.skills_dir),
        max_runtime_sec=args.max_runtime,
        http=HttpSettings(
            timeout=args.http_timeout,
            connect_retries=args.connect_retries,
            retry_backoff=args.retry_backoff,
            callback_retry_sec=args.callback_retry,
        ),
        handle_signals=handle_signals,
    )


def _non_negative(text: str) -> float:
    """A finite number of seconds ≥ 0, else an argparse error naming it."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not a finite number of seconds >= 0: {text!r}")
    return value


def _claim_stdout() -> int:
    """Keep a private copy of fd 1 for envelope lines; send fd 1 to stderr."""
    sys.stdout.flush()
    fd = os.dup(1)
    with contextlib.suppress(OSError):
        os.dup2(2, 1)
    sys.stdout = sys.stderr
    return fd


def _wait_for_binding(out_fd: int) -> None:
    """A warm container's hand-over: load what its first requests need
    (:func:`~.http.preload`), say ready on ``out_fd``, read the binding from
    stdin, take its environment. Raises :class:`~.errors.DispatchError` for a bad
    binding, :class:`~.errors.OutputClosedError` when nobody reads stdout."""
    from sandstream.core import WARM_READY

    from .dispatch import read_binding
    from .http import preload
    from .output import FdSink

    preload()
    FdSink(out_fd)(WARM_READY)
    os.environ.update(read_binding().env)


def main(argv: list[str] | None = None) -> int:
    """Run the container; return the exit code (see the module docstring)."""
    early = _EarlySignals()
    try:
        return _main(argv, early)
    except _Interrupted as exc:
        return 128 + exc.signum
    finally:
        early.restore()


def _main(argv: list[str] | None, early: _EarlySignals) -> int:
    args = build_parser().parse_args(argv)
    huge_pages = forget_heap_tunables()
    try:
        out_fd = _claim_stdout()
    except OSError as exc:
        print(f"sandstream container: stdout unusable: {exc}", file=sys.stderr)
        return 1

    from sandstream.core import Error, load_failure

    from .errors import OutputClosedError
    from .output import Emitter, FdSink

    emitter = Emitter(FdSink(out_fd))
    try:
        import trio

        from .dispatch import decode_dispatch, read_dispatch
        from .errors import DispatchError
        from .procs import adopt_orphans, hide_from_children
        from .run import EXIT_BAD_DISPATCH, EXIT_ERROR, run_container
    except ModuleNotFoundError as exc:  # a core-only install: one line, one terminal
        message = load_failure("sandstream container", "container", exc)
        print(message, file=sys.stderr)
        with contextlib.suppress(OutputClosedError):
            emitter.finish(Error(code="internal_error", message=message))
        os.close(out_fd)
        return 1
    if huge_pages:  # what it runs with is imported: into huge pages, where allowed
        collapse_heap()
    adopt_orphans()  # a tool its agent left behind stays below the container, to be ended
    hide_from_children()  # before the dispatch and its tokens are read; nothing runs yet
    try:
        try:
            early.raising = True
            early.interrupt_if_received()
            if args.warm:
                _wait_for_binding(out_fd)
            data = read_dispatch(args.dispatch)
            early.raising = False
            dispatch = decode_dispatch(data)
            del data  # its tokens: only in ``dispatch``, dropped there once redeemed
        except DispatchError as exc:
            emitter.finish(Error(code=exc.code, message=exc.message))
            return EXIT_BAD_DISPATCH
        options = options_from_args(args)
        if args.dispatch is None or args.dispatch == "-":
            options = dataclasses.replace(options, messages=sys.stdin.buffer)
        return trio.run(run_container, dispatch, emitter, options, early.received)
    except _Interrupted as exc:
        if not emitter.finished:
            name = signal.Signals(exc.signum).name
            emitter.finish(Error(code="cancelled", message=f"run cancelled by {name}"))
        return 128 + exc.signum
    except OutputClosedError:
        return EXIT_ERROR
    except Exception as exc:  # a bug outside the run's own guard: still one terminal
        traceback.print_exc()
        if not emitter.finished:
            with contextlib.suppress(OutputClosedError):
                emitter.finish(Error(code="internal_error", message=f"internal error: {exc!r}"))
        return EXIT_ERROR
    finally:
        os.close(out_fd)
