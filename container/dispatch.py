"""Reading the dispatch: JSON on stdin (or a file), decoded into :class:`~.schemas.Dispatch`."""

from __future__ import annotations

import sys
from typing import Final

from sandstream.core.json_input import JSONInputError, decode_json

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
    """Decode and validate the dispatch JSON.

    Raises :class:`DispatchError` if it is empty, not UTF-8, not JSON, nested too
    deeply or not a valid :class:`~.schemas.Dispatch`.
    """
    if not data.strip():
        raise DispatchError("empty dispatch: expected a JSON object on stdin")
    try:
        return decode_json(data, Dispatch)
    except JSONInputError as exc:
        raise DispatchError(f"invalid dispatch: {exc}") from exc
