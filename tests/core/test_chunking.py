"""Every chunking of a stream gives the same lines, output and turn: CRs and the bound.

The rule (core/splitter.py): ``\\n`` ends a line, exactly one ``\\r`` before it is
dropped, and a line's length is what is left, however the stream was cut. The cases
below are the ones where that used to fail (found by tests/fuzz/chunking.py), then
properties over streams dense in CRs and lines right at the bound.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.core import Mode, NDJSONSplitter, StreamProcessor
from tests.core.helpers import events, line, step
from tests.fuzz.invariants import MODES, Case, check, reference_lines, split_lines

REPO = Path(__file__).resolve().parents[2]

RESULT = line(type="result", message="x").removesuffix(b"\n")
"""``{"type":"result","message":"x"}``: 31 bytes."""

# -- regressions -------------------------------------------------------------------

REGRESSIONS = [
    # Fuzzing, old splitter: "\r\r\n" cut between the CRs lost both CRs.
    Case(b"\x00\x01\r\r\n\n", cuts=(3,), max_line_bytes=61),
    # Fuzzing, old splitter: the same cut made line 2 (3 bytes, "`\xee\r") fit a bound
    # of 2, so the processor said invalid_json where the whole stream said line_too_long.
    Case(
        b"\tAAAAAAAAAA\n`\xee\r\r\n\x01\n\x01\n\n\x02\xff\xf7",
        cuts=(13, 17),
        max_line_bytes=2,
        mode="trace",
    ),
    # The result line plus one CR is one byte over the bound: line_too_long, whole or
    # cut between the CRs (the old splitter accepted the result there).
    *(
        Case(RESULT + b"\r\r\n", cuts=(len(RESULT) + 1,), max_line_bytes=len(RESULT), mode=mode)
        for mode in MODES
    ),
    # The bound plus the CR held back for a possible "\r\n", cut everywhere.
    Case(b"ab\r\r", cuts=(1, 2, 3), max_line_bytes=2),
    Case(b"abc\r\n", cuts=(3, 4), max_line_bytes=2),
    Case(b"\r\r\r\n\r\r\n\r\n\n", cuts=tuple(range(1, 10)), max_line_bytes=1),
]


@pytest.mark.parametrize("case", REGRESSIONS, ids=repr)
def test_regression_cases_give_the_whole_streams_result(case: Case) -> None:
    check(case)


def test_exactly_one_cr_is_dropped_whatever_the_cut() -> None:
    stream = b"a\r\r\n"
    for cut in range(len(stream) + 1):
        assert split_lines(Case(stream, (cut,), max_line_bytes=8)) == [b"a\r"]


@pytest.mark.parametrize("mode", MODES)
def test_a_line_one_cr_over_the_bound_is_too_long_whatever_the_cut(mode: Mode) -> None:
    stream = RESULT + b"\r\r\n"
    for cut in range(len(stream) + 1):
        proc = StreamProcessor(mode, max_line_bytes=len(RESULT))
        proc.feed(stream[:cut])
        proc.feed(stream[cut:])
        proc.close()
        assert [d.code for d in proc.diagnostics] == ["line_too_long"], cut
        assert proc.turn.error is not None and proc.turn.error.code == "upstream_closed"


def test_a_line_with_its_one_cr_at_the_bound_is_accepted_whatever_the_cut() -> None:
    stream = RESULT + b"\r\r\n"  # the line is RESULT + "\r": JSON with trailing whitespace
    for cut in range(len(stream) + 1):
        proc = StreamProcessor(max_line_bytes=len(RESULT) + 1)
        out = proc.feed(stream[:cut]) + proc.feed(stream[cut:]) + proc.close()
        assert proc.diagnostics == [], cut
        assert [e.event for e in events(out)] == ["result", "done"]


# -- properties --------------------------------------------------------------------

_cr_heavy = st.lists(
    st.sampled_from([b"\r", b"\r", b"\n", b"\r\n", b"\r\r\n", b"x", b"{}", RESULT]),
    max_size=30,
).map(b"".join)
_cuts = st.lists(st.integers(min_value=0, max_value=400), max_size=10).map(tuple)


@settings(max_examples=500)
@given(stream=_cr_heavy, cuts=_cuts, bound=st.integers(min_value=1, max_value=40))
def test_cr_heavy_streams_split_by_the_rule_under_any_chunking(
    stream: bytes, cuts: tuple[int, ...], bound: int
) -> None:
    assert split_lines(Case(stream, cuts, bound)) == reference_lines(stream, bound)


@settings(max_examples=300)
@given(
    stream=_cr_heavy,
    cuts=_cuts,
    bound=st.integers(min_value=1, max_value=40),
    mode=st.sampled_from(MODES),
    strict=st.booleans(),
)
def test_cr_heavy_streams_process_the_same_under_any_chunking(
    stream: bytes, cuts: tuple[int, ...], bound: int, mode: Mode, strict: bool
) -> None:
    check(Case(stream, cuts, bound, mode, strict))


_bodies = st.sampled_from(
    [
        RESULT,
        step("s1", "running").removesuffix(b"\n"),
        step("s1", "succeeded").removesuffix(b"\n"),
        line(type="log", level="info", message="m").removesuffix(b"\n"),
        b"not json",
        b"",
    ]
)
_ends = st.sampled_from([b"\n", b"\r\n", b"\r\r\n", b"\r\r\r\n", b"\r", b""])
_lines_near_the_bound = st.lists(st.tuples(_bodies, _ends), min_size=1, max_size=6)


@settings(max_examples=500)
@given(
    lines=_lines_near_the_bound,
    slack=st.integers(min_value=-3, max_value=3),
    cuts=_cuts,
    mode=st.sampled_from(MODES),
    strict=st.booleans(),
)
def test_lines_around_the_bound_get_one_verdict_under_any_chunking(
    lines: list[tuple[bytes, bytes]], slack: int, cuts: tuple[int, ...], mode: Mode, strict: bool
) -> None:
    stream = b"".join(body + end for body, end in lines)
    bound = max(1, len(RESULT) + slack)  # every body is near RESULT's length or short
    check(Case(stream, cuts, bound, mode, strict))


def test_the_splitter_never_holds_more_than_the_bound_plus_one() -> None:
    splitter = NDJSONSplitter(4)
    for byte in b"abcd\r\r\r\rxyz":
        splitter.feed(bytes([byte]))
        assert splitter.buffered <= 5


# -- the fuzz harness ----------------------------------------------------------------


def _harness(*args: str) -> str:
    command = [sys.executable, "-m", "tests.fuzz.chunking", *args]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


@given(
    stream=st.binary(max_size=100),
    cuts=st.lists(st.integers(min_value=0, max_value=100), max_size=16),
    bound=st.integers(min_value=1, max_value=64),
    mode=st.sampled_from(MODES),
    strict=st.booleans(),
)
def test_a_case_survives_the_fuzzer_input_encoding(
    stream: bytes, cuts: list[int], bound: int, mode: Mode, strict: bool
) -> None:
    case = Case(stream, tuple(sorted({c % (len(stream) + 1) for c in cuts})), bound, mode, strict)
    assert Case.from_input(case.to_input()) == case


@given(data=st.binary(max_size=40))
def test_any_fuzzer_input_is_a_case(data: bytes) -> None:
    case = Case.from_input(data)
    assert 1 <= case.max_line_bytes <= 64 and len(case.cuts) <= 16
    assert all(0 <= cut <= len(case.stream) for cut in case.cuts)


@pytest.mark.slow
def test_the_fuzz_harness_seeds_an_empty_corpus_and_fuzzes(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    flags = ["-runs=3000", "-seed=1", f"-artifact_prefix={artifacts}/"]
    log = _harness(str(corpus), *flags, f"-dict={REPO / 'tests' / 'fuzz' / 'chunking.dict'}")
    assert "Done 3000 runs" in log
    seeded = {Case.from_input(path.read_bytes()) for path in corpus.iterdir()}
    assert set(REGRESSIONS) <= seeded
    assert list(artifacts.iterdir()) == []  # no crash- or leak- artifact


@pytest.mark.slow
def test_the_fuzz_harness_replays_a_saved_input(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    finding = tmp_path / "crash-example"
    finding.write_bytes(REGRESSIONS[0].to_input())
    assert f"Executed {finding}" in _harness(str(finding))


# -- lines of the caller's own ---------------------------------------------------------


@given(st.integers(min_value=0, max_value=200))
def test_a_line_inserted_anywhere_leaves_the_pending_line_whole(cut: int) -> None:
    """The runner's note goes between two of the container's lines wherever the
    container's bytes were cut; the container's lines come out as sent."""
    note = line(type="log", level="warn", message="model call failed").removesuffix(b"\n")
    stream = line(type="log", level="info", message="a" * 50) + RESULT + b"\n"
    cut = min(cut, len(stream) - 1)  # before the result's end: after it, nothing is taken
    processor = StreamProcessor("ndjson")
    out = processor.feed(stream[:cut]) + processor.insert(note) + processor.feed(stream[cut:])
    lines = out.splitlines()
    assert note in lines
    assert [x for x in lines if x != note] == stream.splitlines()
    assert processor.turn.result is not None and processor.turn.logs == 2


def test_insert_after_the_turn_closed_raises() -> None:
    from sandstream.core import ProcessorClosedError

    processor = StreamProcessor("ndjson")
    processor.fail("stopped", "x")
    with pytest.raises(ProcessorClosedError):
        processor.insert(RESULT)
