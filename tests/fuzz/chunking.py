"""Coverage-guided fuzzing of the chunking invariant, with atheris (libFuzzer).

    python -m tests.fuzz.chunking [CORPUS_DIR ...] [libFuzzer flags, e.g. -max_total_time=3600]

Each input is decoded into a :class:`~tests.fuzz.invariants.Case` (line bound,
mode, strict, cut points, stream; :meth:`~tests.fuzz.invariants.Case.from_input`)
and checked by :func:`~tests.fuzz.invariants.check`: the splitter, the processor and
the SSE parser must give, cut anywhere, what they give for the whole stream (and the
splitter what the rule says). A mismatch raises
:class:`~tests.fuzz.invariants.ChunkingMismatch` with the case's ``repr``; libFuzzer
then writes the input to ``crash-<sha1>`` and stops. Running the module on that file
replays it. Keep each finding as a regression case in
``tests/core/test_chunking.py``. An empty corpus directory is first filled with
seeds: the example turn of docs/examples and those regression cases. See
docs/fuzzing.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import atheris

# Imported (and so instrumented for coverage) before anything else imports them.
with atheris.instrument_imports(include=["sandstream.core"]):
    import sandstream.core.processor
    import sandstream.core.splitter
    import sandstream.core.sse_parser  # noqa: F401

from tests.fuzz.harness import MAX_CUTS, fuzz
from tests.fuzz.invariants import MODES, Case, check

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "turn.ndjson"


def test_one_input(data: bytes) -> None:
    check(Case.from_input(data))


def seeds() -> Iterator[Case]:
    """The example turn (CRLF too) in every mode and a few chunkings; the regressions."""
    from tests.core.test_chunking import REGRESSIONS

    turn = EXAMPLE.read_bytes()
    for stream in (turn, turn.replace(b"\n", b"\r\n")):
        for mode in MODES:
            for bound in (64, 60):
                yield Case(stream, (), bound, mode)
                yield Case(stream, tuple(range(37, len(stream), 97))[:MAX_CUTS], bound, mode)
    yield from REGRESSIONS


def main() -> None:
    fuzz(test_one_input, lambda: (case.to_input() for case in seeds()))


if __name__ == "__main__":
    main()
