"""Coverage-guided fuzzing of the multipart reader of uploads (server/chat/api/multipart_reader.py).

    python -m tests.fuzz.multipart [CORPUS_DIR ...] [libFuzzer flags]

An input (:class:`~tests.fuzz.harness.Input`, three option bytes): byte 0 the reader's
buffer (280-1300 bytes, so that headers go over it), byte 1 bit 0 the mode: ``raw``
(the boundary is the stream's first ``byte 2 % 71`` bytes, the body the rest) or
``generated`` (a :class:`~tests.fuzz.values.Recipe` for a boundary and parts, fields
and files, whose data is dense in CRs, LFs, dashes and pieces of the boundary,
encoded as a browser does). :func:`check` asserts that

- :class:`~sandstream.server.chat.api.multipart_reader.PartReader` gives the same parts
  (kind, name, file name, data) fed in pieces as fed whole, or the same error, and for
  bad input a ``MultipartError`` (or ``MultipartTooLargeError``) and nothing else;
- a generated body (up to 8 KiB, several times the buffer: memory stays bounded by it)
  reads back as the parts it was made of (round-trip), unless a part's data holds a
  delimiter itself (the decoder takes CR or LF alone as a line break).
"""

from __future__ import annotations

from collections.abc import Iterator

import atheris

with atheris.instrument_imports(include=["sandstream.server.chat.api.multipart_reader"]):
    from werkzeug.sansio.multipart import Data, Field, File

    from sandstream.server.chat.api.multipart_reader import (
        MultipartError,
        MultipartTooLargeError,
        PartReader,
    )

from tests.fuzz.harness import Input, fuzz, pieces
from tests.fuzz.values import Recipe, scale

__all__ = ["MultipartMismatch", "check", "generate"]

Part = tuple[str, str, str | None, bytes]
"""Kind (``file`` or ``field``), name, file name, data."""
_BOUNDARY_CHARS = b"abcXYZ0189'()+_,-./:=? "
_NAMES = ("file", "files", "a b", "résumé")


class MultipartMismatch(AssertionError):
    """Pieces and whole disagreed, or a body did not read back as its parts."""


def generate(recipe: Recipe) -> tuple[bytes, bytes, list[Part]]:
    """A boundary, a body and the parts it holds, as a recipe says."""
    size = recipe.number(1, 70)
    boundary = bytes(recipe.pick(*_BOUNDARY_CHARS) for _ in range(size)).rstrip(b" ") or b"B"
    parts: list[Part] = []
    body = bytearray(recipe.pick(b"", b"preamble\r\n", b"\r\n"))
    while recipe.left and len(body) < 8 * 1024:
        name = recipe.pick(*_NAMES)
        filename = recipe.pick(None, "a.txt", "x/y.bin", "é.png")
        pieces_ = [
            recipe.pick(
                b"\r",
                b"\n",
                b"\r\n",
                b"--",
                b"-",
                boundary[: recipe.number(0, len(boundary))],
                b"x" * recipe.number(0, 300),
                recipe.text(20).encode("utf-8", "replace"),
            )
            for _ in range(recipe.number(0, 8))
        ]
        data = b"".join(pieces_)
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        body += b"--" + boundary + b"\r\n"
        body += f"Content-Disposition: {disposition}\r\n".encode()
        if filename is not None:
            body += b"Content-Type: application/octet-stream\r\n"
        body += b"\r\n" + data + b"\r\n"
        parts.append(("file" if filename is not None else "field", name, filename, data))
    body += b"--" + boundary + b"--\r\n" + recipe.pick(b"", b"epilogue")
    return boundary, bytes(body), parts


def read(boundary: bytes, chunks: list[bytes], buffer: int) -> list[Part] | type[Exception]:
    """The parts, or the class of the error."""
    parts: list[Part] = []
    try:
        reader = PartReader(boundary, max_buffered=buffer)
        events = [event for chunk in chunks for event in reader.feed(chunk)]
        events += reader.close()
    except (MultipartError, MultipartTooLargeError) as exc:
        return type(exc)
    data = bytearray()
    for event in [*events, None]:
        if isinstance(event, Data):
            data += event.data
            continue
        if parts:
            kind, name, filename, _ = parts[-1]
            parts[-1] = (kind, name, filename, bytes(data))
        data = bytearray()
        if isinstance(event, File):
            parts.append(("file", event.name, event.filename, b""))
        elif isinstance(event, Field):
            parts.append(("field", event.name, None, b""))
    return parts


def check(data: bytes) -> None:
    case = Input.decode(data, 3)
    buffer = 280 + 4 * case.options[0]
    made: list[Part] | None = None
    if case.options[1] & 1:
        boundary, body, made = generate(Recipe(case.stream))
        cuts = scale(case.cuts, len(case.stream), len(body))
    else:
        size = case.options[2] % 71
        boundary, body = case.stream[:size], case.stream[size:]
        cuts = tuple(max(0, cut - size) for cut in case.cuts)
    whole = read(boundary, [body], buffer)
    got = read(boundary, pieces(body, cuts), buffer)
    if got != whole:
        raise MultipartMismatch(f"{got!r}\n  != {whole!r}")
    delimited = made is None or any(_delimited(boundary, part[3]) for part in made)
    if not delimited and whole != made:
        raise MultipartMismatch(f"read back as {whole!r}\n  != {made!r}")


def _delimited(boundary: bytes, data: bytes) -> bool:
    """Whether ``data`` holds a delimiter (a line break of any kind, ``--``, boundary)."""
    framed = b"\r\n" + data + b"\r\n"
    return b"\n--" + boundary in framed or b"\r--" + boundary in framed


def test_one_input(data: bytes) -> None:
    check(data)


def seeds() -> Iterator[bytes]:
    body = (
        b'--XyZ\r\nContent-Disposition: form-data; name="files"; filename="a.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\nhello\r\n--Xy\r\n--XyZ\r\n"
        b'Content-Disposition: form-data; name="note"\r\n\r\nhi\r\n--XyZ--\r\n'
    )
    for buffer in (0, 255):
        yield Input(
            bytes([buffer, 0, 3]), tuple(range(3, len(body) + 3, 13))[:16], b"XyZ" + body
        ).encode()
        yield Input(bytes([buffer, 1, 0]), (5, 40, 200), bytes(range(256)) * 4).encode()


def main() -> None:
    fuzz(test_one_input, seeds)


if __name__ == "__main__":
    main()
