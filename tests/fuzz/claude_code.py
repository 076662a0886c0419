"""Coverage-guided fuzzing of the Claude Code translator and of its long-line splitter.

    python -m tests.fuzz.claude_code [CORPUS_DIR ...] [libFuzzer flags]

An input (:class:`~tests.fuzz.harness.Input`, three option bytes): byte 0 is the line
bound (16-271 bytes, so that lines go over it), byte 1 how much of each string an
over-long line keeps, byte 2 bit 0 the mode: ``raw`` (the stream is Claude Code's
stdout as is) or ``generated`` (the stream is a :class:`~tests.fuzz.values.Recipe` for
``stream-json`` lines: init, assistant text and tool calls, tool results, results,
control requests, any JSON, broken lines). :func:`check` asserts that

- :class:`~sandstream.core.translators.claude_code.ClaudeCodeTranslator` never raises
  and gives the same envelopes fed in pieces as fed whole;
- :class:`~sandstream.core.translators.long_lines.LongLineSplitter` gives the same
  lines in pieces as whole, holds at most the bound (plus a CR and an escape) between
  feeds, passes a line within the bound untouched, and an over-long line it shortens
  keeps its fields: when the line was JSON, the shortened one is JSON of the same
  shape, the same keys, numbers and literals, each string the original or a prefix of
  it ending with the cut marker, and it is within the bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["sandstream.core.translators"]):
    import msgspec

    from sandstream.core.errors import JSONInputError
    from sandstream.core.json_input import decode_json
    from sandstream.core.translators.claude_code import ClaudeCodeTranslator
    from sandstream.core.translators.long_lines import (
        CUT_MARKER,
        LongLineSplitter,
        ShortenedLine,
    )

from tests.fuzz.harness import Input, fuzz, pieces
from tests.fuzz.invariants import reference_lines
from tests.fuzz.values import Recipe, scale

__all__ = ["TranslationMismatch", "check", "generate", "kept"]

DATA = Path(__file__).resolve().parents[1] / "data" / "claude_code"


class TranslationMismatch(AssertionError):
    """Pieces and whole disagreed, or a shortened line lost a field."""


def generate(recipe: Recipe) -> bytes:
    """Claude Code ``stream-json`` lines, as a recipe says."""
    out = bytearray()
    while recipe.left and len(out) < 8 * 1024:
        kind = recipe.number(0, 7)
        ids = ("toolu_1", "toolu_2", recipe.text(8))
        obj: Any
        if kind == 0:
            obj = {
                "type": "system",
                "subtype": recipe.pick("init", "api_retry", "hook_response"),
                "session_id": recipe.text(),
                "model": recipe.text(),
                "tools": recipe.value(1),
                "mcp_servers": [{"name": recipe.text(), "status": recipe.text()}],
            }
        elif kind == 1:
            blocks = [
                {"type": "text", "text": recipe.text(200)}
                if recipe.flag()
                else {
                    "type": "tool_use",
                    "id": recipe.pick(*ids),
                    "name": recipe.text(),
                    "input": recipe.value(),
                }
                for _ in range(recipe.number(0, 3))
            ]
            obj = {"type": "assistant", "message": {"content": blocks}}
            if recipe.flag():
                obj["error"] = recipe.pick("rate_limit", "billing_error", recipe.text())
        elif kind == 2:
            content = (
                recipe.text(400)
                if recipe.flag()
                else [
                    {"type": "text", "text": recipe.text(400)},
                    recipe.value(2),
                    {"type": "image", "source": {"data": recipe.text(), "media_type": "image/png"}},
                ]
            )
            obj = {
                "type": "user",
                "message": {
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": recipe.pick(*ids),
                            "content": content,
                            "is_error": recipe.value(0),
                        }
                    ]
                },
                "tool_result_meta": [
                    {"id": recipe.pick(*ids), "non_execution_kind": recipe.text()}
                ],
            }
        elif kind == 3:
            obj = {
                "type": "result",
                "subtype": recipe.pick("success", "error_max_turns", "error_during_execution"),
                "is_error": recipe.flag(),
                "result": recipe.text(100),
                "errors": [recipe.text()],
                "num_turns": recipe.value(0),
                "permission_denials": [
                    {"tool_use_id": recipe.pick(*ids), "tool_name": recipe.text()}
                ],
            }
        elif kind == 4:
            obj = {
                "type": recipe.pick("control_request", "rate_limit_event", "stream_event"),
                "request": {"subtype": "can_use_tool", "input": recipe.value()},
                "rate_limit_info": recipe.value(1),
            }
        elif kind == 5:
            obj = {
                "type": "system",
                "subtype": "permission_denied",
                "tool_use_id": recipe.pick(*ids),
            }
        else:
            obj = recipe.value()
        out += recipe.line(obj)
    return bytes(out)


class _Object(list[tuple[Any, Any]]):
    """A JSON object as its pairs, in order (duplicate keys kept)."""


def kept(original: Any, short: Any) -> bool:
    """Whether ``short`` is ``original`` with strings (keys too) cut and marked."""
    if isinstance(original, str):
        if not isinstance(short, str):
            return False
        if short == original:
            return True
        head, marker, tail = short.rpartition(CUT_MARKER)
        return bool(marker) and original.startswith(head) and tail.endswith(" more bytes]")
    if type(original) is not type(short):
        return False
    if isinstance(original, list):
        return len(original) == len(short) and all(
            kept(a, b) for a, b in zip(original, short, strict=True)
        )
    if isinstance(original, tuple):  # a key and its value
        return kept(original[0], short[0]) and kept(original[1], short[1])
    return bool(original == short)


def _pairs(line: bytes) -> Any:
    return json.loads(line, object_pairs_hook=_Object)


def _is_json(line: bytes) -> bool:
    try:
        decode_json(line)
    except JSONInputError:
        return False
    return True


def check_splitter(stream: bytes, cuts: tuple[int, ...], bound: int, keep: int) -> None:
    def split(parts: list[bytes]) -> list[tuple[bytes | None, int]]:
        splitter = LongLineSplitter(bound, keep)
        lines: list[bytes | None] = []
        for part in parts:
            lines += splitter.feed(part)
            if splitter.buffered > bound + 1 + 11:
                raise TranslationMismatch(f"holds {splitter.buffered} bytes, bound {bound}")
        lines += splitter.close()
        return [(line, getattr(line, "cut", -1)) for line in lines]

    got, want = split(pieces(stream, cuts)), split([stream])
    if got != want:
        raise TranslationMismatch(f"lines: {got!r}\n  != {want!r}")
    originals = reference_lines(stream, len(stream))
    for original, (line, _) in zip(originals, want, strict=True):
        assert original is not None
        if len(original) <= bound:
            if line != original or isinstance(line, ShortenedLine):
                raise TranslationMismatch(f"a line within the bound changed: {original!r}")
        elif line is not None:
            if len(line) > bound:
                raise TranslationMismatch(f"shortened past the bound: {line!r}")
            if _is_json(original) and not (_is_json(line) and kept(_pairs(original), _pairs(line))):
                raise TranslationMismatch(f"lost its fields: {original!r}\n  -> {line!r}")


def translate(parts: list[bytes], bound: int, keep: int) -> bytes:
    translator = ClaudeCodeTranslator(bound, keep_string_bytes=keep, max_tracked_steps=4)
    out = [envelope for part in parts for envelope in translator.feed(part)]
    return msgspec.json.encode([*out, *translator.close()])


def check(data: bytes) -> None:
    case = Input.decode(data, 3)
    bound = 16 + case.options[0]
    keep = 1 + case.options[1] % (bound // 2)
    stream, cuts = case.stream, case.cuts
    if case.options[2] & 1:
        stream = generate(Recipe(case.stream))
        cuts = scale(cuts, len(case.stream), len(stream))
    check_splitter(stream, cuts, bound, keep)
    got, want = translate(pieces(stream, cuts), bound, keep), translate([stream], bound, keep)
    if got != want:
        raise TranslationMismatch(f"envelopes: {got!r}\n  != {want!r}")


def test_one_input(data: bytes) -> None:
    check(data)


def seeds() -> Iterator[bytes]:
    for path in sorted(DATA.glob("*.jsonl")):
        stream = path.read_bytes()
        for bound in (255, 40):
            yield Input(
                bytes([bound, 30, 0]), tuple(range(5, len(stream), 301))[:16], stream
            ).encode()
    for size in (64, 512, 4096):
        yield Input(
            bytes([100, 20, 1]), (7, 50, 300), bytes(range(256)) * (size // 256 + 1)
        ).encode()


def main() -> None:
    fuzz(test_one_input, seeds)


if __name__ == "__main__":
    main()
