"""One-time tokens: minted per dispatch, stored hashed, redeemed once.

A dispatch gets three tokens: ``setup`` (``GET /env``, 10 min), ``run``
(``GET /config``, 10 min) and ``upload`` (``POST /results``, 60 min). The plaintext
goes to the sandbox in the dispatch and is never stored: the store keeps
``sha256(token)`` with the purpose, the session and the expiry, and redeems it with
one conditional ``UPDATE`` (so a token is consumed at most once, even across
processes). A callback may carry an ``Idempotency-Key`` (:func:`idempotency_key`): the
token is then stored with it, and the same token with the same key is answered again
while it is unexpired and its session unsettled (a retry whose first answer was lost;
docs/protocol.md, "Workspace callbacks"). Bad input: a malformed key raises
:class:`~sandstream.server.chat.model.IdempotencyKeyError`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from sandstream.server.chat.model import IdempotencyKeyError, Purpose, TokenMint

__all__ = [
    "DEFAULT_LIFETIMES",
    "PURPOSES",
    "MintedTokens",
    "bearer_token",
    "hash_token",
    "idempotency_key",
    "mint_tokens",
]

MAX_IDEMPOTENCY_KEY: Final = 200

PURPOSES: Final[tuple[Purpose, ...]] = ("setup", "run", "upload")

DEFAULT_LIFETIMES: Final[Mapping[Purpose, float]] = MappingProxyType(
    {"setup": 600.0, "run": 600.0, "upload": 3600.0}
)
"""Seconds each token is valid: 10 min, 10 min, 60 min."""


def hash_token(token: str) -> str:
    """The stored form of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class MintedTokens:
    """A dispatch's three plaintext tokens and their stored (hashed) forms."""

    setup: str
    run: str
    upload: str
    stored: tuple[TokenMint, ...]


def mint_tokens(
    now_ms: int, lifetimes: Mapping[Purpose, float] = DEFAULT_LIFETIMES
) -> MintedTokens:
    """Three fresh tokens (256 random bits each) valid from ``now_ms`` for their lifetimes."""
    plain = {purpose: f"otp_{purpose}_{secrets.token_urlsafe(32)}" for purpose in PURPOSES}
    stored = tuple(
        TokenMint(
            hash=hash_token(plain[purpose]),
            purpose=purpose,
            expires_at=now_ms + int(lifetimes[purpose] * 1000),
        )
        for purpose in PURPOSES
    )
    return MintedTokens(plain["setup"], plain["run"], plain["upload"], stored)


def bearer_token(authorization: str | None) -> str | None:
    """The credentials of an ``Authorization: Bearer <token>`` header, else ``None``."""
    if not authorization:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or not credentials:
        return None
    return credentials


def idempotency_key(header: str | None) -> str | None:
    """The value of an ``Idempotency-Key`` header (``None`` when absent). Raises
    :class:`IdempotencyKeyError` unless it is 1-200 visible ASCII characters."""
    if header is None:
        return None
    if not 0 < len(header) <= MAX_IDEMPOTENCY_KEY or not all("!" <= char <= "~" for char in header):
        raise IdempotencyKeyError(
            f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} visible ASCII characters"
        )
    return header
