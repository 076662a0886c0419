"""Reading the dispatch: JSON on stdin (or a file), decoded into :class:`~.schemas.Dispatch`."""

from __future__ import annotations

import sys
from typing import Final

import msgspec

from .errors import DispatchError
from .schemas import Dispatch

__all__ = ["MAX_DISPATCH_BYTES", "decode_dispatch", "read_dispatch"]

MAX_DISPATCH_BYTES: Final = 16 * 1024 * 1024


def read_dispatch(path: str | None) -> bytes:
    """The raw dispatch: the file at ``path``, or stdin to EOF when ``path`` is None or "-".

    Raises :class:`DispatchError` if it cannot be read or exceeds 16 MiB.
    """
    try:
        if path is None or path == "-":
            data = sys.stdin.buffer.read(MAX_DISPATCH_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_DISPATCH_BYTES + 1)
    except OSError as exc:
        raise DispatchError(f"cannot read the dispatch: {exc}") from exc
    if len(data) > MAX_DISPATCH_BYTES:
        raise DispatchError(f"dispatch larger than {MAX_DISPATCH_BYTES} bytes")
    return data


def decode_dispatch(data: bytes) -> Dispatch:
    """Decode and validate the dispatch JSON; raise :class:`DispatchError` if invalid."""
    if not data.strip():
        raise DispatchError("empty dispatch: expected a JSON object on stdin")
    try:
        return msgspec.json.decode(data, type=Dispatch)
    except msgspec.DecodeError as exc:
        raise DispatchError(f"invalid dispatch: {exc}") from exc
