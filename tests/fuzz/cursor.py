"""Coverage-guided fuzzing of the cursor parser (core/cursors.py).

    python -m tests.fuzz.cursor [CORPUS_DIR ...] [libFuzzer flags]

An input (:class:`~tests.fuzz.harness.Input`, one option byte; no cut points): byte 0
bit 0 says whether the stream is a ``?cursor=`` and a ``Last-Event-ID`` (split at the
first NUL) or one cursor; the text is the stream's bytes as a server reads them (UTF-8
for a query, Latin-1 for a header). :func:`check` asserts that
:func:`~sandstream.core.cursors.parse_cursor` raises
:class:`~sandstream.core.errors.CursorError` and nothing else for any text that is not
the canonical decimal form of an integer from 0 to ``MAX_CURSOR``, and for one that is,
returns that integer, which writes back as the same text (round-trip); and that
:func:`~sandstream.core.cursors.resume_cursor` picks ``Last-Event-ID`` over the query,
checking both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import atheris

with atheris.instrument_imports(include=["sandstream.core.cursors"]):
    from sandstream.core.cursors import MAX_CURSOR, parse_cursor, resume_cursor
    from sandstream.core.errors import CursorError

from tests.fuzz.harness import Input, fuzz

__all__ = ["CursorMismatch", "check", "reference"]

_CANONICAL = re.compile(r"0|[1-9][0-9]*")


class CursorMismatch(AssertionError):
    """The parser accepted what it must refuse, or the other way round."""


def reference(text: str) -> int | None:
    """The cursor ``text`` is, by the rule (``None``: it is none)."""
    if text.isascii() and _CANONICAL.fullmatch(text) and int(text) <= MAX_CURSOR:
        return int(text)
    return None


def parsed(text: str) -> int | None:
    try:
        value = parse_cursor(text)
    except CursorError:
        return None
    if str(value) != text:
        raise CursorMismatch(f"{text!r} read as {value}, which writes back differently")
    return value


def check(data: bytes) -> None:
    case = Input.decode(data, 1)
    if not case.options[0] & 1:
        for text in (case.stream.decode("utf-8", "replace"), case.stream.decode("latin-1")):
            if parsed(text) != reference(text):
                raise CursorMismatch(f"{text!r}: {parsed(text)} != {reference(text)}")
        return
    query_bytes, _, header_bytes = case.stream.partition(b"\0")
    query = query_bytes.decode("utf-8", "replace") if query_bytes != b"-" else None
    header = header_bytes.decode("latin-1") if header_bytes != b"-" else None
    checked = [text for text in (query, header) if text]
    if query == "" or any(reference(text) is None for text in checked):
        want: object = CursorError
    else:
        want = reference(header) if header else (None if query is None else reference(query))
    try:
        got: object = resume_cursor(query, header)
    except CursorError:
        got = CursorError
    if got != want:
        raise CursorMismatch(f"resume_cursor({query!r}, {header!r}) = {got!r}, want {want!r}")


def test_one_input(data: bytes) -> None:
    check(data)


def seeds() -> Iterator[bytes]:
    for text in (
        b"0",
        b"3",
        b"9007199254740991",
        b"9007199254740992",
        b"+1",
        b" 1",
        b"3_0",
        "\u0663".encode(),
        "\uff11".encode(),
        b"007",
        b"1e3",
        b"",
    ):
        yield Input(b"\0", (), text).encode()
    for pair in (b"5\x0012", b"-\x007", b"5\x00", b"x\x001", b"-\x00-"):
        yield Input(b"\1", (), pair).encode()


def main() -> None:
    fuzz(test_one_input, seeds)


if __name__ == "__main__":
    main()
