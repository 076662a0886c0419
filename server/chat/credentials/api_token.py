"""The chat API token: ``Authorization: Bearer <token>`` on every chat and agents route.

:func:`resolve_api_token` takes ``SANDSTREAM_API_TOKEN`` when set; otherwise the token
saved in the data dir (``api-token``, mode 0600), generating and saving one on the
first start. The sandbox callbacks do not use it: they take one-time tokens.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sandstream.server.chat.model import ChatConfigError

__all__ = [
    "API_TOKEN_ENV",
    "API_TOKEN_FILE",
    "ApiToken",
    "read_or_create_secret",
    "resolve_api_token",
]

API_TOKEN_ENV: Final = "SANDSTREAM_API_TOKEN"
API_TOKEN_FILE: Final = "api-token"


@dataclass(frozen=True, slots=True)
class ApiToken:
    """The token and where it came from: ``env``, ``file`` or ``generated`` (just now)."""

    value: str
    source: str
    path: Path | None = None


def read_or_create_secret(path: Path) -> tuple[str, bool]:
    """The secret stored at ``path``, or a new one written there (0600). ``(secret, new)``.

    Two processes starting together agree: the file is created exclusively, and the
    loser reads the winner's. Raises :class:`ChatConfigError` for an empty file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        value = path.read_text(encoding="utf-8").strip()
        if not value:
            raise ChatConfigError(f"{path} is empty: delete it to generate a new token") from None
        return value, False
    value = secrets.token_urlsafe(32)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(value + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    return value, True


def resolve_api_token(environ: Mapping[str, str], data_dir: Path) -> ApiToken:
    """``$SANDSTREAM_API_TOKEN``, else the data dir's saved token (created if missing)."""
    value = environ.get(API_TOKEN_ENV)
    if value is not None:
        if not value.strip():
            raise ChatConfigError(f"{API_TOKEN_ENV} is set but blank")
        return ApiToken(value.strip(), "env")
    path = data_dir / API_TOKEN_FILE
    secret, new = read_or_create_secret(path)
    return ApiToken(secret, "generated" if new else "file", path)
