"""The chunking invariant: a stream gives the same result whole or cut anywhere.

One :class:`Case` is a stream, the points where it is cut into feeds, and the
options. :func:`check` feeds it whole and cut, to the splitter, the processor and
the SSE parser, and raises :class:`ChunkingMismatch` (whose message is the case's
``repr``, ready to paste into the regression list) when any result differs. The
property tests in ``tests/core`` and the fuzz harness (:mod:`tests.fuzz.chunking`)
share it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import msgspec

from sandstream.core import Mode, NDJSONSplitter, StreamProcessor
from sandstream.core.errors import SSEParseError
from sandstream.core.sse_parser import Comment, ServerSentEvent, SSEParser
from tests.fuzz.harness import MAX_CUTS, Input, pieces

__all__ = [
    "MAX_CUTS",
    "MAX_FUZZ_LINE_BYTES",
    "MODES",
    "Case",
    "ChunkingMismatch",
    "check",
    "parse_sse",
    "pieces",
    "process",
    "reference_lines",
    "split_lines",
]

MODES: tuple[Mode, ...] = ("sse", "ndjson", "trace")
MAX_FUZZ_LINE_BYTES = 64


@dataclass(frozen=True)
class Case:
    """A stream, where it is cut (offsets, taken modulo its length + 1), and options."""

    stream: bytes
    cuts: tuple[int, ...] = ()
    max_line_bytes: int = 16
    mode: Mode = "sse"
    strict: bool = False

    @property
    def whole(self) -> Case:
        return replace(self, cuts=())

    @classmethod
    def from_input(cls, data: bytes) -> Case:
        """Decode a fuzzer input; any bytes are a case (missing header bytes read as 0).

        Byte 0: ``max_line_bytes - 1`` (mod 64). Byte 1: the mode (low bits, mod 3)
        and ``strict`` (bit 7). Byte 2: the number of cuts (mod 17), then each cut as
        two big-endian bytes. The rest is the stream.
        """
        raw = Input.decode(data, 2)
        return cls(
            raw.stream,
            raw.cuts,
            1 + raw.options[0] % MAX_FUZZ_LINE_BYTES,
            MODES[(raw.options[1] & 0x7F) % len(MODES)],
            bool(raw.options[1] & 0x80),
        )

    def to_input(self) -> bytes:
        """The fuzzer input that decodes to this case (a seed for the corpus)."""
        if not 1 <= self.max_line_bytes <= MAX_FUZZ_LINE_BYTES or len(self.cuts) > MAX_CUTS:
            raise ValueError(f"not expressible as a fuzzer input: {self!r}")
        mode = MODES.index(self.mode) | (0x80 if self.strict else 0)
        return Input(bytes([self.max_line_bytes - 1, mode]), self.cuts, self.stream).encode()


class ChunkingMismatch(AssertionError):
    """Feeding a case in pieces gave another result than feeding it whole."""


def reference_lines(stream: bytes, max_line_bytes: int) -> list[bytes | None]:
    """The splitter's rule applied to the whole stream at once (see core/splitter.py)."""
    raw = stream.split(b"\n")
    if raw[-1] == b"":
        raw.pop()  # the stream ended with "\n": no final unterminated line
    lines: list[bytes | None] = []
    for line in raw:
        line = line.removesuffix(b"\r")
        lines.append(None if len(line) > max_line_bytes else line)
    return lines


def split_lines(case: Case) -> list[bytes | None]:
    splitter = NDJSONSplitter(case.max_line_bytes)
    lines: list[bytes | None] = []
    for piece in pieces(case.stream, case.cuts):
        lines += splitter.feed(piece)
    return lines + splitter.close()


def process(case: Case) -> tuple[bytes, dict[str, Any]]:
    """The processor's output and the folded turn, as comparable values."""
    proc = StreamProcessor(case.mode, strict=case.strict, max_line_bytes=case.max_line_bytes)
    out = b"".join([*map(proc.feed, pieces(case.stream, case.cuts)), proc.close()])
    turn = proc.turn
    state = {
        "steps": msgspec.json.encode(turn.steps),  # args and results are raw JSON
        "terminal": msgspec.json.encode(turn.terminal),
        "terminal_line": turn.terminal_line,
        "synthesized": turn.synthesized,
        "diagnostics": turn.diagnostics,
        "diagnostic_count": turn.diagnostic_count,
        "lines": turn.lines,
        "logs": turn.logs,
        "last_event_id": proc.last_event_id,
    }
    return out, state


def parse_sse(
    data: bytes, cuts: tuple[int, ...] | list[int], **bounds: int
) -> tuple[list[ServerSentEvent | Comment], str, int | None] | type[SSEParseError]:
    """Items, last event id and retry of an SSE stream fed in pieces (or the error)."""
    parser = SSEParser(include_comments=True, **bounds)
    items: list[ServerSentEvent | Comment] = []
    try:
        for piece in pieces(data, cuts):
            items += parser.feed(piece)
    except SSEParseError:
        return SSEParseError
    items += parser.close()
    return items, parser.last_event_id, parser.retry


def check(case: Case) -> None:
    """Raise :class:`ChunkingMismatch` unless ``case`` gives the whole stream's results."""
    whole = case.whole
    _expect(split_lines(case), reference_lines(case.stream, case.max_line_bytes), case, "split")
    _expect(process(case), process(whole), case, "processor")
    bound = {"max_line_chars": case.max_line_bytes}
    _expect(
        parse_sse(case.stream, case.cuts, **bound),
        parse_sse(case.stream, (), **bound),
        case,
        "SSE parser",
    )


def _expect(got: object, want: object, case: Case, what: str) -> None:
    if got != want:
        raise ChunkingMismatch(f"{what}: {got!r} != {want!r}\n  {case!r}")
