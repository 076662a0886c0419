"""Structured input for the harnesses whose parsers want JSON: values drawn from bytes.

Coverage cannot guide libFuzzer through msgspec's C decoder, so raw bytes rarely make
a valid line; a harness in "generated" mode instead reads its stream as a recipe
(atheris' ``FuzzedDataProvider``) for JSON values and lines of a given shape, which
the fuzzer mutates like any input. :func:`scale` moves the input's cut points onto
the generated stream.
"""

from __future__ import annotations

import json
from typing import Any

import atheris

__all__ = ["Recipe", "scale"]


def scale(cuts: tuple[int, ...], raw_length: int, length: int) -> tuple[int, ...]:
    """Cut points into a raw stream of ``raw_length`` bytes, spread over ``length``."""
    return tuple(sorted({cut * length // max(1, raw_length) for cut in cuts}))


class Recipe:
    """Draw values from bytes; every method works (with defaults) once they run out."""

    def __init__(self, data: bytes) -> None:
        self._fdp = atheris.FuzzedDataProvider(data)

    @property
    def left(self) -> int:
        return int(self._fdp.remaining_bytes())

    def number(self, low: int, high: int) -> int:
        return int(self._fdp.ConsumeIntInRange(low, high))

    def flag(self) -> bool:
        return bool(self._fdp.ConsumeBool())

    def pick(self, *choices: Any) -> Any:
        return choices[self.number(0, len(choices) - 1)]

    def text(self, most: int = 24) -> str:
        """A string: short ASCII, any code point (surrogates too), or one long run."""
        kind = self.number(0, 3)
        if kind == 0:
            return str(self._fdp.ConsumeUnicode(self.number(0, most)))
        if kind == 1:
            return str(self._fdp.ConsumeUnicodeNoSurrogates(self.number(0, most)))
        if kind == 2:  # a long string, so that lines go over their bound
            return str(self.pick("x", "é", "\U0001f600", '"\\', "\n")) * self.number(0, 100)
        return str(self.pick("", "id1", "id2", "tool", "text", "Bash", "a b"))

    def value(self, depth: int = 3) -> Any:
        """Any JSON value, nested at most ``depth`` deep."""
        kind = self.number(0, 7 if depth > 0 else 5)
        if kind == 0:
            return None
        if kind == 1:
            return self.flag()
        if kind == 2:
            return self._fdp.ConsumeInt(self.number(1, 9))
        if kind == 3:
            return self._fdp.ConsumeRegularFloat()
        if kind in (4, 5):
            return self.text()
        if kind == 6:
            return [self.value(depth - 1) for _ in range(self.number(0, 4))]
        return {self.text(8): self.value(depth - 1) for _ in range(self.number(0, 4))}

    def line(self, obj: Any) -> bytes:
        """``obj`` as one JSON line: ASCII-escaped or raw UTF-8 (lone surrogates kept as
        their invalid bytes), ``\\n`` or ``\\r\\n``; now and then a broken one."""
        text = json.dumps(obj, ensure_ascii=self.flag(), separators=self.pick((",", ":"), None))
        data = text.encode("utf-8", "surrogatepass")
        damage = self.number(0, 15)
        if damage == 0 and data:
            data = data[: self.number(0, len(data) - 1)]  # cut short
        elif damage == 1:
            data += self._fdp.ConsumeBytes(self.number(0, 8))  # trailing junk
        return data + bytes(self.pick(b"\n", b"\r\n"))
