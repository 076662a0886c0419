"""An upstream answer's body framing, sans-IO: any pieces give the same payload, the
same end and the same bytes past it; framing that breaks HTTP/1.1 is refused."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.server.gateway.errors import UpstreamFramingError
from sandstream.server.gateway.framing import BodyReader, ChunkedBody, LengthBody


def _pieces(data: bytes, points: list[int]) -> list[bytes]:
    edges = [0, *sorted({p % (len(data) + 1) for p in points}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def _read(reader: BodyReader, pieces: list[bytes]) -> tuple[bytes, bool, bytes]:
    payload = b"".join(piece for data in pieces for piece in reader.feed(data))
    return payload, reader.done, reader.leftover


@given(
    chunks=st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    extension=st.sampled_from([b"", b";name=value", b" ;x"]),
    line_end=st.sampled_from([b"\r\n", b"\n"]),
    trailers=st.lists(st.sampled_from([b"x-trailer: 1", b"etag: a"]), max_size=2),
    after=st.binary(max_size=20),
    points=st.lists(st.integers(0, 1000), max_size=12),
)
def test_a_chunked_body_reads_the_same_in_any_pieces(
    chunks: list[bytes],
    extension: bytes,
    line_end: bytes,
    trailers: list[bytes],
    after: bytes,
    points: list[int],
) -> None:
    framed = b"".join(b"%x%s%s%s%s" % (len(c), extension, line_end, c, line_end) for c in chunks)
    framed += b"0" + line_end + b"".join(t + line_end for t in trailers) + line_end
    got = _read(ChunkedBody(), _pieces(framed + after, points))
    assert got == (b"".join(chunks), True, after)


@given(
    body=st.binary(max_size=200),
    after=st.binary(max_size=20),
    points=st.lists(st.integers(0, 300), max_size=8),
)
def test_a_length_body_reads_the_same_in_any_pieces(
    body: bytes, after: bytes, points: list[int]
) -> None:
    assert _read(LengthBody(len(body)), _pieces(body + after, points)) == (body, True, after)


@given(cut=st.integers(0, 25), points=st.lists(st.integers(0, 40), max_size=5))
def test_a_chunked_body_cut_short_is_not_done(cut: int, points: list[int]) -> None:
    framed = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    payload, done, _ = _read(ChunkedBody(), _pieces(framed[:cut], points))
    assert not done
    assert b"hello world".startswith(payload)


@pytest.mark.parametrize(
    "framed",
    [b"zz\r\nhello\r\n", b"5\r\nhello!!\r\n", b"5" + b";x" * 40000 + b"\r\n"],
    ids=["not-hex", "data-past-size", "line-too-long"],
)
def test_chunked_framing_that_breaks_http_is_refused(framed: bytes) -> None:
    with pytest.raises(UpstreamFramingError):
        ChunkedBody().feed(framed)
