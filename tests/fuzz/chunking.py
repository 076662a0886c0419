"""Coverage-guided fuzzing of the chunking invariant, with atheris (libFuzzer).

    python -m tests.fuzz.chunking [CORPUS_DIR ...] [libFuzzer flags, e.g. -max_total_time=3600]

Each input is decoded into a :class:`~tests.fuzz.invariants.Case` (line bound,
mode, strict, cut points, stream) and checked by :func:`~tests.fuzz.invariants.check`:
the splitter, the processor and the SSE parser must give, cut anywhere, what they give
for the whole stream (and the splitter what the rule says). A mismatch raises
:class:`~tests.fuzz.invariants.ChunkingMismatch` with the case's ``repr``; libFuzzer
then writes the input to ``crash-<sha1>`` and stops. Running the module on that file
replays it. Keep each finding as a regression case in
``tests/core/test_chunking.py``. See docs/fuzzing.md.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["sandstream.core"]):
    import sandstream.core.processor
    import sandstream.core.splitter
    import sandstream.core.sse_parser  # noqa: F401

from tests.fuzz.invariants import MODES, Case, check

MAX_CUTS = 8


def case_from(data: bytes) -> Case:
    """Decode fuzzer bytes into a case: small bounds, so the fuzzer reaches them."""
    provider = atheris.FuzzedDataProvider(data)
    max_line_bytes = provider.ConsumeIntInRange(1, 64)
    mode = MODES[provider.ConsumeIntInRange(0, len(MODES) - 1)]
    strict = provider.ConsumeBool()
    cuts = tuple(
        provider.ConsumeIntInRange(0, 1 << 16)
        for _ in range(provider.ConsumeIntInRange(0, MAX_CUTS))
    )
    stream = provider.ConsumeBytes(provider.remaining_bytes())
    points = tuple(sorted({cut % (len(stream) + 1) for cut in cuts}))  # as pieces() cuts
    return Case(stream, points, max_line_bytes, mode, strict)


def test_one_input(data: bytes) -> None:
    check(case_from(data))


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
