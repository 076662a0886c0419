"""The blob pack reader: every chunking gives the same blobs, any damage is refused.

Properties over random packs cut at random places: the same ordered starts and ends
and the same bytes per blob as the pack fed whole; a flipped byte anywhere, or a body
cut anywhere but between blobs, raises :class:`BlobPackError`. Then the malformed
headers and bounds one by one, and the reader's refusal after close or an error.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core import (
    MAX_BLOB_HEADER_BYTES,
    BlobData,
    BlobEnd,
    BlobEvent,
    BlobPackError,
    BlobPackReader,
    BlobStart,
    blob_header,
)

MAX = 1 << 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pack_of(blobs: Sequence[bytes]) -> bytes:
    return b"".join(blob_header(sha(blob), len(blob)) + blob for blob in blobs)


def split(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = [0, *sorted(min(cut, len(data)) for cut in cuts), len(data)]
    return [data[start:end] for start, end in itertools.pairwise(points)]


def read(chunks: Sequence[bytes], max_blob_bytes: int = MAX) -> list[BlobEvent]:
    """Feed ``chunks`` and close; the events, BlobData of a blob joined into one."""
    reader = BlobPackReader(max_blob_bytes)
    events: list[BlobEvent] = []
    for chunk in chunks:
        events.extend(reader.feed(chunk))
    reader.close()
    return joined(events)


def joined(events: Sequence[BlobEvent]) -> list[BlobEvent]:
    out: list[BlobEvent] = []
    for event in events:
        if isinstance(event, BlobData) and out and isinstance(out[-1], BlobData):
            out[-1] = BlobData(out[-1].data + event.data)
        else:
            out.append(event)
    return out


def expected(blobs: Sequence[bytes]) -> list[BlobEvent]:
    events: list[BlobEvent] = []
    for blob in blobs:
        events.append(BlobStart(sha(blob), len(blob)))
        if blob:
            events.append(BlobData(blob))
        events.append(BlobEnd(sha(blob)))
    return events


def refused(chunks: Sequence[bytes], max_blob_bytes: int = MAX) -> bool:
    try:
        read(chunks, max_blob_bytes)
    except BlobPackError:
        return True
    return False


blobs_strategy = st.lists(
    st.one_of(st.binary(max_size=64), st.binary(min_size=200, max_size=600)), max_size=6
)


@given(blobs=blobs_strategy, cuts=st.lists(st.integers(min_value=0, max_value=4000)))
def test_every_chunking_gives_the_same_blobs(blobs: list[bytes], cuts: list[int]) -> None:
    pack = pack_of(blobs)
    assert read([pack]) == expected(blobs)
    assert read(split(pack, cuts)) == expected(blobs)


@given(blobs=blobs_strategy)
def test_one_byte_at_a_time_gives_the_same_blobs(blobs: list[bytes]) -> None:
    pack = pack_of(blobs)
    assert read([pack[i : i + 1] for i in range(len(pack))]) == expected(blobs)


@given(
    blobs=st.lists(st.binary(max_size=300), min_size=1, max_size=4),
    where=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
    cuts=st.lists(st.integers(min_value=0, max_value=2000)),
)
def test_a_flipped_byte_is_refused(
    blobs: list[bytes], where: int, flip: int, cuts: list[int]
) -> None:
    pack = bytearray(pack_of(blobs))
    pack[where % len(pack)] ^= flip
    assert refused(split(bytes(pack), cuts))


@given(blobs=st.lists(st.binary(max_size=100), min_size=1, max_size=4))
def test_a_body_cut_inside_a_header_or_blob_is_refused(blobs: list[bytes]) -> None:
    pack = pack_of(blobs)
    boundaries = {0}
    for index in range(len(blobs)):
        boundaries.add(len(pack_of(blobs[: index + 1])))
    for end in range(len(pack)):
        if end in boundaries:
            kept = [blob for i, blob in enumerate(blobs) if len(pack_of(blobs[: i + 1])) <= end]
            assert read([pack[:end]]) == expected(kept)
        else:
            assert refused([pack[:end]]), end


def test_a_chunk_inside_one_blob_is_passed_on_as_it_is() -> None:
    blob = b"x" * 1000
    reader = BlobPackReader(MAX)
    reader.feed(blob_header(sha(blob), len(blob)) + blob[:10])
    chunk = blob[10:500]
    events = reader.feed(chunk)
    assert len(events) == 1 and isinstance(events[0], BlobData)
    assert events[0].data is chunk


VALID_SHA = sha(b"abc").encode()

MALFORMED = [
    VALID_SHA.upper() + b" 3\n",
    VALID_SHA[:63] + b" 3\n",
    VALID_SHA + b"0 3\n",
    VALID_SHA[:63] + b"g 3\n",
    VALID_SHA + b" 03\n",
    VALID_SHA + b" +3\n",
    VALID_SHA + b" -3\n",
    VALID_SHA + b" \n",
    VALID_SHA + b"  3\n",
    VALID_SHA + b"3\n",
    VALID_SHA + b" 3 \n",
    VALID_SHA + b"\t3\n",
    VALID_SHA + b" 3\r\n",
    VALID_SHA + " \N{FULLWIDTH DIGIT THREE}\n".encode(),
    VALID_SHA + b" 0x3\n",
    b"\n",
    b"abc\n",
]


@pytest.mark.parametrize("header", MALFORMED, ids=repr)
def test_a_malformed_header_is_refused(header: bytes) -> None:
    assert refused([header + b"abc"])
    assert refused([header[:1], header[1:] + b"abc"])


def test_a_blob_over_the_bound_is_refused() -> None:
    assert read([pack_of([b"abc"])], max_blob_bytes=3) == expected([b"abc"])
    assert refused([pack_of([b"abc"])], max_blob_bytes=2)
    assert refused([blob_header(sha(b"x" * 10), 10)], max_blob_bytes=9)


def test_a_header_line_is_at_most_the_bound() -> None:
    longest = VALID_SHA + b" " + b"9" * (MAX_BLOB_HEADER_BYTES - 65)
    assert len(longest) == MAX_BLOB_HEADER_BYTES
    reader = BlobPackReader(10**40)
    assert reader.feed(longest + b"\n") == [BlobStart(VALID_SHA.decode(), int(longest[65:]))]
    over = longest + b"9"
    assert refused([over + b"\n"], max_blob_bytes=10**40)
    assert refused([over[:50], over[50:] + b"\n"], max_blob_bytes=10**40)


def test_a_header_line_without_newline_is_refused_once_over_the_bound() -> None:
    reader = BlobPackReader(MAX)
    assert reader.feed(b"a" * MAX_BLOB_HEADER_BYTES) == []
    with pytest.raises(BlobPackError):
        reader.feed(b"a")


def test_the_reader_refuses_input_after_close_or_an_error() -> None:
    reader = BlobPackReader(MAX)
    reader.feed(pack_of([b"abc"]))
    reader.close()
    with pytest.raises(BlobPackError):
        reader.feed(pack_of([b"abc"]))
    with pytest.raises(BlobPackError):
        reader.close()
    failed = BlobPackReader(MAX)
    with pytest.raises(BlobPackError):
        failed.feed(b"not a header\n")
    with pytest.raises(BlobPackError):
        failed.feed(pack_of([b"abc"]))
    with pytest.raises(BlobPackError):
        failed.close()


def test_blob_header_refuses_what_a_reader_would() -> None:
    assert blob_header(VALID_SHA.decode(), 0) == VALID_SHA + b" 0\n"
    with pytest.raises(BlobPackError):
        blob_header(VALID_SHA.decode().upper(), 3)
    with pytest.raises(BlobPackError):
        blob_header(VALID_SHA.decode()[:63], 3)
    with pytest.raises(BlobPackError):
        blob_header(VALID_SHA.decode(), -1)
