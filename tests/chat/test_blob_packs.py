"""A blob pack received into the blob store: every chunking of a body stores the same
blobs, and a refused body (tampered, cut, over the bound) leaves no temp file and
none of the blob it was in."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.core import blob_header
from sandstream.server.chat.api.blob_packs import receive_pack
from sandstream.server.chat.model import SnapshotTooLargeError
from sandstream.server.chat.store import BlobStore
from sandstream.server.http import BadRequestError


def _pack(blobs: list[bytes]) -> bytes:
    return b"".join(blob_header(hashlib.sha256(b).hexdigest(), len(b)) + b for b in blobs)


def _stored(store: BlobStore) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in store.blobs.rglob("*") if path.is_file()}


async def _chunks(body: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    start = 0
    for cut in sorted({min(cut, len(body)) for cut in cuts}):
        yield body[start:cut]
        start = cut
    yield body[start:]


def _receive(
    body: bytes, cuts: list[int], max_bytes: int
) -> tuple[list[str] | Exception, BlobStore]:
    """Receive ``body`` cut at ``cuts`` into a fresh blob store: the hashes or the error."""
    store = BlobStore(Path(tempfile.mkdtemp(prefix="blob-pack-")))
    store.ensure_dirs_sync()

    async def run() -> list[str] | Exception:
        try:
            return await receive_pack(_chunks(body, cuts), store, max_bytes=max_bytes)
        except (BadRequestError, SnapshotTooLargeError) as exc:
            return exc

    return trio.run(run), store


_blobs = st.lists(st.binary(max_size=300), max_size=5)


@settings(max_examples=60, deadline=None)
@given(blobs=_blobs, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_every_chunking_stores_the_same_blobs(blobs: list[bytes], cuts: list[int]) -> None:
    outcome, store = _receive(_pack(blobs), cuts, max_bytes=1500)
    try:
        assert outcome == [hashlib.sha256(b).hexdigest() for b in blobs]
        assert _stored(store) == {hashlib.sha256(b).hexdigest(): b for b in blobs}
        assert list(store.tmp.iterdir()) == []
    finally:
        _remove(store)


@settings(max_examples=60, deadline=None)
@given(
    blobs=st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=4),
    flip=st.integers(min_value=0),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_a_tampered_or_cut_blob_is_never_stored(
    blobs: list[bytes], flip: int, cuts: list[int]
) -> None:
    body = bytearray(_pack(blobs))
    last_header = len(body) - len(blobs[-1])
    index = last_header + flip % len(blobs[-1])  # a byte of the last blob
    for broken in (
        bytes(body[:index] + bytes([body[index] ^ 1]) + body[index + 1 :]),
        bytes(body[:-1]),
    ):
        outcome, store = _receive(broken, cuts, max_bytes=1500)
        try:
            assert isinstance(outcome, BadRequestError)
            stored = _stored(store)
            assert hashlib.sha256(blobs[-1]).hexdigest() not in stored or blobs[-1] in blobs[:-1]
            assert list(store.tmp.iterdir()) == []
        finally:
            _remove(store)


@pytest.mark.parametrize("max_bytes", [0, 10])
def test_more_blob_bytes_than_the_bound_are_refused(max_bytes: int) -> None:
    outcome, store = _receive(_pack([b"x" * 6, b"y" * 6]), [3, 80], max_bytes=max_bytes)
    try:
        assert isinstance(outcome, SnapshotTooLargeError)
        assert list(_stored(store)) == (
            [] if max_bytes == 0 else [hashlib.sha256(b"x" * 6).hexdigest()]
        )
        assert list(store.tmp.iterdir()) == []
    finally:
        _remove(store)


def _remove(store: BlobStore) -> None:
    for path in sorted(store.root.rglob("*"), reverse=True):
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink()
    store.root.rmdir()
