"""Reading the dispatch: JSON on stdin (or a file), decoded into a
:class:`~sandstream.core.schemas.Dispatch`.

Stdin framing: when the first line of stdin is a complete JSON value, that line is the
dispatch and stdin stays open for the user messages that follow it, one JSON line each
(:mod:`.inbox`; EOF: no more messages). This is how the runner writes it. Otherwise
(a pretty-printed file, ``sandstream container < dispatch.json``) the whole of stdin,
to EOF, is the dispatch, and no message follows.

A warm container (``--warm``, started ahead of its turn) first reads one more line, its
:class:`~sandstream.core.schemas.WarmBinding` (:func:`read_binding`): the turn's
environment, which only arrives once a turn claims it.
"""

from __future__ import annotations

import sys
from typing import BinaryIO, Final

from sandstream.core import Dispatch, JSONInputError, WarmBinding, decode_json

from .errors import DispatchError

__all__ = [
    "MAX_BINDING_BYTES",
    "MAX_DISPATCH_BYTES",
    "decode_binding",
    "decode_dispatch",
    "read_binding",
    "read_dispatch",
]

MAX_DISPATCH_BYTES: Final = 16 * 1024 * 1024
MAX_BINDING_BYTES: Final = 1024 * 1024


def read_dispatch(path: str | None, stdin: BinaryIO | None = None) -> bytes:
    """The raw dispatch: the file at ``path``, or from stdin when ``path`` is None or "-".

    From ``stdin`` (default: the process's): its first line if that is a complete JSON
    value (the rest is left for :mod:`.inbox`), else everything to EOF. Raises
    :class:`DispatchError` if it cannot be read or exceeds 16 MiB.
    """
    try:
        if path is None or path == "-":
            source = sys.stdin.buffer if stdin is None else stdin
            data = source.readline(MAX_DISPATCH_BYTES + 1)
            if not _is_json_line(data):
                data += source.read(MAX_DISPATCH_BYTES + 1 - len(data))
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
    deeply or not a valid :class:`~sandstream.core.schemas.Dispatch`.
    """
    if not data.strip():
        raise DispatchError("empty dispatch: expected a JSON object on stdin")
    try:
        return decode_json(data, Dispatch)
    except JSONInputError as exc:
        raise DispatchError(f"invalid dispatch: {exc}") from exc


def _is_json_line(data: bytes) -> bool:
    """True for a ``\n``-terminated line holding one complete JSON value."""
    if not data.endswith(b"\n"):
        return False
    try:
        decode_json(data)
    except JSONInputError:
        return False
    return True


def read_binding(stdin: BinaryIO | None = None) -> WarmBinding:
    """A warm container's binding: the first line of ``stdin`` (default: the process's),
    decoded (:func:`decode_binding`). Raises :class:`DispatchError` if it cannot be read,
    is not one whole line within :data:`MAX_BINDING_BYTES` or is not a binding."""
    source = sys.stdin.buffer if stdin is None else stdin
    try:
        data = source.readline(MAX_BINDING_BYTES + 1)
    except OSError as exc:
        raise DispatchError(f"cannot read the binding: {exc}") from exc
    return decode_binding(data)


def decode_binding(data: bytes) -> WarmBinding:
    """Decode a binding line (``\n``-terminated). Raises :class:`DispatchError` for
    anything else: EOF before the line ends (no turn came), over
    :data:`MAX_BINDING_BYTES`, not a :class:`~sandstream.core.schemas.WarmBinding`."""
    if not data.endswith(b"\n"):
        if len(data) > MAX_BINDING_BYTES:
            raise DispatchError(f"binding larger than {MAX_BINDING_BYTES} bytes")
        raise DispatchError("stdin ended before a warm container's binding line")
    try:
        return decode_json(data, WarmBinding)
    except JSONInputError as exc:
        raise DispatchError(f"invalid binding: {exc}") from exc
