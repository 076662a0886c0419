"""Properties of the core that must hold for every input, not just the examples."""

from __future__ import annotations

import json
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandstream.core import Mode, NDJSONSplitter, StreamProcessor
from tests.core.helpers import events, line, step
from tests.fuzz.invariants import MODES, Case, check, pieces, process, reference_lines

_ids = st.sampled_from(["s1", "s2", "s3"])
_valid_lines = st.one_of(
    st.builds(
        lambda i, s, a: step(i, s, args=a),
        _ids,
        st.sampled_from(["running", "succeeded", "failed"]),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=4), inner, max_size=3)
            ),
            max_leaves=6,
        ),
    ),
    st.builds(lambda m: line(type="log", level="info", message=m), st.text(max_size=20)),
    st.just(line(type="result", message="done")),
    st.just(line(type="error", code="x", message="y")),
)
_noise = st.one_of(
    st.binary(max_size=40),
    st.just(b"\r\n"),
    st.just(b"\n"),
    st.just(b'{"type":"step","id":"s1"'),
    st.just(b"\xff\xfe\n"),
)
_streams = st.lists(st.one_of(_valid_lines, _noise), max_size=25).map(b"".join)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=_streams,
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
    mode=st.sampled_from(MODES),
    strict=st.booleans(),
    max_line_bytes=st.sampled_from([8, 64, 1 << 20]),
)
def test_any_chunking_gives_byte_identical_output(
    data: bytes, cuts: list[int], mode: Mode, strict: bool, max_line_bytes: int
) -> None:
    check(Case(data, tuple(cuts), max_line_bytes, mode, strict))


@settings(max_examples=50)
@given(data=_streams, mode=st.sampled_from(MODES))
def test_one_byte_at_a_time_gives_the_same_output(data: bytes, mode: Mode) -> None:
    check(Case(data, tuple(range(len(data))), 1 << 20, mode))


def _terminal_count(out: bytes, mode: str) -> int:
    if mode == "ndjson":
        kinds = [json.loads(raw)["type"] for raw in out.splitlines()]
        return sum(kind in ("result", "error") for kind in kinds)
    parsed = events(out)
    assert parsed[-1].event == "done"
    return sum(e.event in ("result", "error") for e in parsed)


@settings(max_examples=300)
@given(
    data=st.one_of(st.binary(max_size=300), _streams),
    mode=st.sampled_from(MODES),
    strict=st.booleans(),
    cancel=st.booleans(),
)
def test_arbitrary_bytes_never_raise_and_end_in_exactly_one_terminal(
    data: bytes, mode: str, strict: bool, cancel: bool
) -> None:
    proc = StreamProcessor(mode, strict=strict)  # type: ignore[arg-type]
    out = proc.feed(data) + (proc.cancel() if cancel else proc.close())
    assert _terminal_count(out, mode) == 1
    assert proc.turn.terminal is not None


@settings(max_examples=200)
@given(data=_streams, mode=st.sampled_from(MODES))
def test_forwarded_output_is_only_valid_envelope_lines(data: bytes, mode: Mode) -> None:
    out, _ = process(Case(data, max_line_bytes=1 << 20, mode=mode))
    lines = out.splitlines() if mode == "ndjson" else [e.data.encode() for e in events(out)]
    validator = StreamProcessor("ndjson")
    for raw in lines:
        if mode != "ndjson" and raw.startswith(b'{"terminal"'):
            continue  # the done frame's own payload
        validator.feed(raw + b"\n")
    assert validator.diagnostics == []


@given(
    data=st.binary(max_size=200) | _streams,
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=8),
    bound=st.integers(min_value=1, max_value=50),
)
def test_splitter_matches_a_reference_split(data: bytes, cuts: list[int], bound: int) -> None:
    splitter = NDJSONSplitter(bound)
    got: list[bytes | None] = []
    for piece in pieces(data, cuts):
        got += splitter.feed(piece)
    got += splitter.close()
    assert got == reference_lines(data, bound)
    assert splitter.buffered == 0


def test_memory_stays_bounded_on_an_endless_line() -> None:
    bound = 64 * 1024
    proc = StreamProcessor(max_line_bytes=bound)
    chunk = b"x" * 256 * 1024
    tracemalloc.start()
    try:
        for _ in range(200):  # 50 MiB without a newline
            assert proc.feed(chunk) == b""
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert proc._splitter.buffered <= bound + 1
    assert peak < bound + 2 * len(chunk)
    out = proc.feed(b"\n" + line(type="result", message="ok")) + proc.close()
    assert [d.code for d in proc.diagnostics] == ["line_too_long"]
    assert [e.event for e in events(out)] == ["result", "done"]
