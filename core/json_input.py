"""Decoding untrusted JSON: every way bad input fails becomes one :class:`JSONInputError`.

:func:`decode_json` decodes anything from outside the process (a dispatch, a skill's
answer, an HTTP body, a subprocess's output line): not JSON, the wrong shape, invalid
UTF-8 anywhere (also in values msgspec would skip) and nesting too deep all raise
:class:`JSONInputError`, so one ``except`` covers them and nothing escapes as an
internal error (docs/protocol.md, "Decoding other untrusted JSON").
"""

from __future__ import annotations

from typing import Any, Final, TypeVar, overload

import msgspec

from .errors import JSONInputError

__all__ = ["decode_json"]

T = TypeVar("T")

_TOO_DEEP: Final = "JSON nested too deeply"


@overload
def decode_json(data: bytes | str) -> Any: ...


@overload
def decode_json(data: bytes | str, type: type[T]) -> T: ...


@overload
def decode_json(data: bytes | str, type: object) -> Any: ...  # a union, an alias


def decode_json(data: bytes | str, type: Any = Any) -> Any:
    """Decode ``data`` as JSON into ``type`` (default: any JSON value).

    Raises :class:`JSONInputError` for anything that is not valid UTF-8 JSON of that
    type. Pure and synchronous: no I/O, nothing to cancel.
    """
    if isinstance(data, bytes) and not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONInputError(
                "invalid_utf8", f"invalid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}"
            ) from None
    try:
        return msgspec.json.decode(data, type=type)
    except msgspec.ValidationError as exc:
        raise JSONInputError("invalid_value", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise JSONInputError("invalid_json", str(exc)) from None
    except UnicodeError:  # a str holding lone surrogates (bytes were checked above)
        raise JSONInputError("invalid_utf8", "not encodable as UTF-8 (lone surrogates)") from None
    except RecursionError:
        raise JSONInputError("too_deep", _TOO_DEEP) from None
