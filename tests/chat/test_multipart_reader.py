"""The multipart reader: every chunking of a body gives the same parts.

Bodies are framed by httpx (the client the container writes back with), with short
boundaries and contents full of line breaks, dashes and boundary prefixes, so that a
delimiter is cut everywhere it can be.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import httpx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from werkzeug.sansio.multipart import Data, Field, File

from sandstream.server.chat.api.multipart_reader import (
    MAX_BUFFERED,
    MultipartError,
    MultipartTooLargeError,
    PartEvent,
    PartReader,
)


@dataclass(frozen=True)
class Part:
    kind: str  # "file" or "field"
    name: str
    filename: str | None
    content: bytes


def framed(boundary: str, parts: list[Part], epilogue: bytes = b"") -> bytes:
    """The body httpx sends for ``parts`` (its fields come first, then its files)."""
    files = [
        (p.name, (p.filename, p.content, "application/octet-stream"))
        for p in parts
        if p.kind == "file"
    ]
    fields = {p.name: p.content.decode() for p in parts if p.kind == "field"}
    assert [p.kind for p in parts] == ["field"] * len(fields) + ["file"] * len(files)
    request = httpx.Request(
        "POST",
        "http://upload.test/",
        data=fields,
        files=files,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    body = request.read()
    assert body.endswith(f"--{boundary}--\r\n".encode())
    return body + epilogue


def decode(boundary: str, chunks: Iterable[bytes], max_buffered: int = MAX_BUFFERED) -> list[Part]:
    reader = PartReader(boundary.encode(), max_buffered=max_buffered)
    events: list[PartEvent] = []
    for chunk in chunks:
        events += reader.feed(chunk)
    events += reader.close()
    parts: list[Part] = []
    open_part = False
    for event in events:
        if isinstance(event, (File, Field)):
            assert not open_part, "a part started inside another"
            filename = event.filename if isinstance(event, File) else None
            kind = "file" if isinstance(event, File) else "field"
            parts.append(Part(kind, event.name, filename, b""))
            open_part = True
        else:
            assert isinstance(event, Data) and open_part
            last = parts[-1]
            parts[-1] = Part(last.kind, last.name, last.filename, last.content + event.data)
            open_part = event.more_data
    assert not open_part
    return parts


def cut(body: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(body), *(p % (len(body) + 1) for p in points)})
    return [body[a:b] for a, b in itertools.pairwise(edges)]


tricky_bytes = st.lists(
    st.sampled_from([b"\r", b"\n", b"\r\n", b"-", b"--", b"a", b"b", b"\r\n--a", b"x" * 50])
    | st.binary(max_size=40),
    max_size=30,
).map(b"".join)
boundaries = st.text("ab'()+_,-./:=?0123456789", min_size=1, max_size=70).filter(
    lambda b: not b.endswith(" ")
)
names = st.text("abcdefghijklmnopqrstuvwxyzé0123456789 ._-", min_size=1, max_size=20)
parts_strategy = st.builds(
    lambda fields, files: [Part("field", n, None, v.encode()) for n, v in fields.items()] + files,
    st.dictionaries(names, st.text(max_size=30), max_size=2),
    st.lists(
        st.builds(
            Part,
            kind=st.just("file"),
            name=st.sampled_from(["files", "other"]),
            filename=names,
            content=tricky_bytes,
        ),
        min_size=1,
        max_size=5,
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    boundary=boundaries,
    parts=parts_strategy,
    points=st.lists(st.integers(min_value=0), max_size=40),
    max_buffered=st.sampled_from([280, 300, 512, 1000, MAX_BUFFERED]),
    epilogue=tricky_bytes,
)
def test_every_chunking_gives_the_same_parts(
    boundary: str, parts: list[Part], points: list[int], max_buffered: int, epilogue: bytes
) -> None:
    assume(all(f"--{boundary}".encode() not in p.content for p in parts))
    body = framed(boundary, parts, epilogue)
    assert decode(boundary, [body], max_buffered) == parts
    assert decode(boundary, cut(body, points), max_buffered) == parts


@settings(max_examples=50, deadline=None)
@given(boundary=boundaries, parts=parts_strategy, size=st.integers(1, 7))
def test_byte_by_byte_is_the_same_as_whole(boundary: str, parts: list[Part], size: int) -> None:
    assume(all(f"--{boundary}".encode() not in p.content for p in parts))
    body = framed(boundary, parts)
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    assert decode(boundary, pieces, 300) == parts


@settings(max_examples=300, deadline=None)
@given(
    boundary=boundaries,
    head=parts_strategy,
    garbage=tricky_bytes,
    points=st.lists(st.integers(min_value=0), max_size=20),
)
def test_bad_bodies_raise_only_multipart_errors(
    boundary: str, head: list[Part], garbage: bytes, points: list[int]
) -> None:
    """A body cut short and followed by anything: parts or a clear error, nothing else."""
    body = framed(boundary, head)
    body = body[: len(body) // 2] + garbage
    with contextlib.suppress(MultipartError, MultipartTooLargeError):
        decode(boundary, cut(body, points), 300)


def test_a_body_bigger_than_the_buffer_in_one_chunk() -> None:
    """A chunk many times the decoder's buffer (a server that read ahead) is decoded."""
    content = bytes(range(256)) * (3 * MAX_BUFFERED // 256 + 7)
    parts = [Part("file", "files", "big.bin", content), Part("file", "files", "b.txt", b"b")]
    body = framed("xyz", parts)
    assert decode("xyz", [body]) == parts
    assert decode("xyz", cut(body, [1, 3 * MAX_BUFFERED + 1])) == parts


@pytest.mark.parametrize("pieces", [1, 2, 1000])
def test_headers_over_the_buffer_are_refused_for_every_chunking(pieces: int) -> None:
    body = framed("b", [Part("file", "files", "f" * 600, b"data")])
    size = -(-len(body) // pieces)
    with pytest.raises(MultipartTooLargeError, match="over 512 bytes"):
        decode("b", [body[i : i + size] for i in range(0, len(body), size)], 512)
    assert decode("b", [body], 1024)[0].filename == "f" * 600


def test_a_truncated_body_is_malformed() -> None:
    body = framed("b", [Part("file", "files", "a.txt", b"abc")])
    with pytest.raises(MultipartError, match="malformed"):
        decode("b", [body[:-8]])


@pytest.mark.parametrize("boundary", [b"", b"x" * 71])
def test_boundaries_outside_rfc_2046_are_refused(boundary: bytes) -> None:
    with pytest.raises(MultipartError, match="1 to 70 bytes"):
        PartReader(boundary)


def test_a_part_starting_with_its_boundary_is_refused_for_every_chunking() -> None:
    """A delimiter right after a part's headers (RFC 2046 forbids the boundary in a
    part): werkzeug reads it as the part's end when whole, as its content when a chunk
    ends after the next delimiter; refused, it is the same answer every time."""
    body = (
        b'--B\r\nContent-Disposition: form-data; name="f"; filename="a"\r\n\r\n--B'
        b'\r\n--B\r\nContent-Disposition: form-data; name="g"\r\n\r\nxyz\r\n--B--\r\n'
    )
    for first, second in itertools.combinations_with_replacement(range(len(body) + 1), 2):
        with pytest.raises(MultipartError, match="starts with the boundary"):
            decode("B", cut(body, [first, second]))
    empty = [Part("file", "files", "empty.txt", b""), Part("file", "files", "b.txt", b"b")]
    assert decode("B", [framed("B", empty)]) == empty  # an empty part is not that
