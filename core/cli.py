"""The ``sandstream`` command: ``convert`` and ``validate`` run on the core alone.

Other commands are entry points in the group ``sandstream.commands``
(:data:`COMMANDS_GROUP`), each a function taking the arguments after its name and
returning the exit status, its module's ``HELP`` its line in ``sandstream --help``::

    [project.entry-points."sandstream.commands"]
    serve = "some.module:serve_main [server]"

A command's module is imported only when it runs or ``--help`` lists it. Bad input: a
command whose module cannot be imported exits 2 with one line: the extra (in brackets)
to install when a distribution that extra requires is not installed, else the import
failure itself (a broken install is not fixed by installing the extra again). A
reader that goes away (``… | head``) ends any command quietly with status 141.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from importlib.metadata import (
    EntryPoint,
    PackageNotFoundError,
    entry_points,
    version,
)
from typing import BinaryIO, Final, cast

from .commands import exit_quietly_on_broken_pipe, load_failure, missing_requirements
from .envelope import LIVE_EXTENSION
from .processor import Mode, StreamProcessor
from .splitter import DEFAULT_MAX_LINE_BYTES

__all__ = ["COMMANDS_GROUP", "main"]

_READ_SIZE: Final = 64 * 1024
COMMANDS_GROUP: Final = "sandstream.commands"
"""The entry-point group of the commands other packages add (module docstring)."""
_CORE_COMMANDS: Final = ("convert", "validate")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sandstream`` command line; returns the exit status."""
    return exit_quietly_on_broken_pipe(partial(_main, argv))


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    plugged = _plugged_commands()
    if args and args[0] in plugged:
        return _run_plugged(args[0], plugged[args[0]], args[1:])
    # The plugged commands' modules are imported for their help only when it may show.
    listing = not (args and args[0] in _CORE_COMMANDS)
    parser = _parser(plugged, listing=listing)
    options = parser.parse_args(args)
    handler = cast(Callable[[argparse.Namespace], int], options.handler)
    return handler(options)


def _parser(plugged: dict[str, EntryPoint], *, listing: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandstream", description="Stream processor for AI-agent sandbox runs."
    )
    parser.add_argument("--version", action="version", version=f"sandstream {_version()}")
    commands = parser.add_subparsers(metavar="COMMAND", required=True)

    convert = commands.add_parser(
        "convert", help="stdin NDJSON -> stdout SSE or validated NDJSON, as it streams"
    )
    convert.add_argument(
        "--mode",
        choices=("sse", "ndjson", "trace"),
        default="sse",
        help="sse: chat frames without logs; trace: SSE with logs; ndjson: validated lines",
    )
    _add_common(convert)
    convert.set_defaults(handler=_convert)

    validate = commands.add_parser(
        "validate", help="check an NDJSON run against the envelope rules"
    )
    validate.add_argument("file", help="NDJSON file to check ('-' for stdin)")
    _add_common(validate)
    validate.set_defaults(handler=_validate)

    for name, entry in plugged.items():
        commands.add_parser(name, help=_summary(entry) if listing else None, add_help=False)
    return parser


def _version() -> str:
    """This installation's version (its metadata), or ``unknown`` for a bare checkout."""
    try:
        return version("sandstream")
    except PackageNotFoundError:
        return "unknown"


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strict", action="store_true", help="end the turn at the first bad line")
    parser.add_argument(
        "--live",
        action="store_true",
        help="accept the live extension's delta and permission lines (docs/protocol.md)",
    )
    parser.add_argument(
        "--max-line-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_LINE_BYTES,
        help=f"longest accepted line (default {DEFAULT_MAX_LINE_BYTES})",
    )


def _convert(options: argparse.Namespace) -> int:
    proc = _processor(cast(Mode, options.mode), options)
    stdin = sys.stdin.fileno()
    out = sys.stdout.buffer
    reported = 0
    try:
        while chunk := os.read(stdin, _READ_SIZE):
            _write(out, proc.feed(chunk))
            reported = _report_bad_lines(proc, reported)
        _write(out, proc.close())
    except KeyboardInterrupt:
        _write(out, proc.cancel("interrupted"))
        return 130
    finally:
        _report_bad_lines(proc, reported, final=True)
    return 0 if proc.turn.result is not None else 1


def _processor(mode: Mode, options: argparse.Namespace) -> StreamProcessor:
    return StreamProcessor(
        mode,
        strict=options.strict,
        max_line_bytes=options.max_line_bytes,
        extensions=[LIVE_EXTENSION] if options.live else [],
    )


def _report_bad_lines(proc: StreamProcessor, reported: int, *, final: bool = False) -> int:
    """Print the diagnostics after the first ``reported`` to stderr; the new count.

    With ``final``, also the number of those past the kept bound.
    """
    turn = proc.turn
    for diagnostic in turn.diagnostics[reported:]:
        print(f"sandstream convert: {diagnostic}", file=sys.stderr)
    hidden = turn.diagnostic_count - len(turn.diagnostics)
    if final and hidden:
        print(f"sandstream convert: ... and {hidden} more bad line(s)", file=sys.stderr)
    return len(turn.diagnostics)


def _validate(options: argparse.Namespace) -> int:
    proc = _processor("ndjson", options)
    try:
        source = sys.stdin.buffer if options.file == "-" else open(options.file, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"sandstream validate: {exc}", file=sys.stderr)
        return 2
    with source:
        while chunk := source.read(_READ_SIZE):
            proc.feed(chunk)
    proc.close()
    turn = proc.turn
    rows = turn.steps
    statuses = Counter(row.status for row in rows)
    steps = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    terminal = "none (synthesized upstream_closed)" if turn.synthesized else _describe(proc)
    print(f"{options.file}: {_count(turn.lines, 'line')}, ", end="")
    print(_count(len(rows) + turn.omitted_steps, "step"), end="")
    if turn.omitted_steps:
        print(
            f" (the first {len(rows)} kept{': ' + steps if steps else ''}; "
            f"{turn.omitted_steps} more only checked line by line: a turn keeps at most "
            f"{turn.max_steps} steps and {turn.max_step_bytes} bytes of step lines)",
            end="",
        )
    else:
        print(f" ({steps})" if steps else "", end="")
    print(f", {_count(turn.logs, 'log')}, terminal: {terminal}")
    for diagnostic in turn.diagnostics:
        print(f"  {diagnostic}")
    hidden = turn.diagnostic_count - len(turn.diagnostics)
    if hidden:
        print(f"  ... and {hidden} more")
    if turn.diagnostic_count or turn.synthesized:
        print(
            f"{turn.diagnostic_count} violation(s)" + (", no terminal" if turn.synthesized else "")
        )
        return 1
    return 0


def _count(n: int, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _describe(proc: StreamProcessor) -> str:
    turn = proc.turn
    if turn.result is not None:
        return f"result at line {turn.terminal_line}"
    assert turn.error is not None
    return f"error {turn.error.code!r} at line {turn.terminal_line}"


def _plugged_commands() -> dict[str, EntryPoint]:
    """The commands of :data:`COMMANDS_GROUP` by name, sorted; the first of a name wins,
    and none replaces ``convert`` or ``validate``. Nothing is imported."""
    found: dict[str, EntryPoint] = {}
    for entry in entry_points(group=COMMANDS_GROUP):
        if entry.name not in _CORE_COMMANDS:
            found.setdefault(entry.name, entry)
    return dict(sorted(found.items()))


def _run_plugged(name: str, entry: EntryPoint, argv: list[str]) -> int:
    """Import the command ``entry`` names and run it; 2, with one line, if it cannot be."""
    try:
        command = entry.load()
    except ModuleNotFoundError as exc:
        extra = entry.extras[0] if entry.extras else None
        print(load_failure(f"sandstream {name}", extra, exc, entry.dist), file=sys.stderr)
        return 2
    return cast(Callable[[list[str]], int], command)(argv)


def _summary(entry: EntryPoint) -> str:
    """The command's line in ``sandstream --help``: its module's ``HELP``, and its extra."""
    needs = f"sandstream[{entry.extras[0]}]" if entry.extras else ""
    try:
        entry.load()
    except ModuleNotFoundError as exc:
        if needs and missing_requirements(entry.dist, entry.extras[0]):
            return f"not installed: needs {needs}"
        return f"cannot be loaded ({exc})"
    summary = str(getattr(importlib.import_module(entry.module), "HELP", ""))
    return f"{summary} (needs {needs})" if needs else summary


def _write(out: BinaryIO, data: bytes) -> None:
    if data:
        out.write(data)
        out.flush()


def _positive_int(text: str) -> int:
    """A count of at least 1; argparse's message names the flag and this reason."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


if __name__ == "__main__":
    raise SystemExit(main())
