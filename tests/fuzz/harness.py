"""What every fuzz harness shares: the input layout, corpus seeds and the entry point.

An input is ``options`` (a fixed number of bytes, each harness reads them its own way),
one byte for the number of cut points (mod 17), two big-endian bytes per cut point,
then the stream: :meth:`Input.decode` reads any bytes that way (missing bytes read as
0) and :meth:`Input.encode` is its inverse, for seeds and regression cases.
:func:`fuzz` is a harness's ``main``: it seeds an empty corpus directory, then hands
``sys.argv`` (libFuzzer's flags) to atheris. See docs/fuzzing.md.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_CUTS", "Input", "fuzz", "pieces", "seed"]

MAX_CUTS = 16


def pieces(data: bytes, cuts: tuple[int, ...] | list[int]) -> list[bytes]:
    """``data`` cut at ``cuts`` (each taken modulo ``len(data) + 1``); empty pieces kept."""
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    bounds = [0, *points, len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


@dataclass(frozen=True)
class Input:
    """A harness's options, where the stream is cut (sorted offsets into it), the stream."""

    options: bytes
    cuts: tuple[int, ...]
    stream: bytes

    @classmethod
    def decode(cls, data: bytes, options: int) -> Input:
        """Read a fuzzer input whose first ``options`` bytes are the options."""
        head = data[: options + 1].ljust(options + 1, b"\0")
        count = head[options] % (MAX_CUTS + 1)
        start = options + 1
        raw = data[start : start + 2 * count].ljust(2 * count, b"\0")
        stream = data[start + 2 * count :]
        cuts = {int.from_bytes(raw[i : i + 2], "big") for i in range(0, 2 * count, 2)}
        return cls(head[:options], tuple(sorted({c % (len(stream) + 1) for c in cuts})), stream)

    def encode(self) -> bytes:
        """The fuzzer input that decodes to this one (with ``len(options)`` options)."""
        if len(self.cuts) > MAX_CUTS:
            raise ValueError(f"more than {MAX_CUTS} cuts: {self!r}")
        cuts = b"".join((cut % 65536).to_bytes(2, "big") for cut in self.cuts)
        return self.options + bytes([len(self.cuts)]) + cuts + self.stream

    def pieces(self) -> list[bytes]:
        return pieces(self.stream, self.cuts)


def seed(directory: Path, inputs: Iterable[bytes]) -> None:
    """Write ``inputs`` into ``directory`` if it exists and is empty."""
    if not directory.is_dir() or any(directory.iterdir()):
        return
    for data in inputs:
        (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


def fuzz(test_one_input: Callable[[bytes], None], seeds: Callable[[], Iterable[bytes]]) -> None:
    """Run libFuzzer with ``sys.argv``; the first corpus directory is seeded if empty.

    File arguments (not directories) are replayed once each, as libFuzzer does.
    """
    import atheris

    corpus = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    if corpus:
        seed(Path(corpus[0]), seeds())
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
