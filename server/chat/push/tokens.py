"""The JWTs the push senders sign, and the credentials they sign them with.

- APNs: an ES256 *provider token* (``iss`` the team id, ``iat``, header ``kid`` the
  key id) signed with the team's ``.p8`` auth key. :class:`ApnsProviderTokens` makes
  one and reuses it for :data:`APNS_TOKEN_LIFETIME` (Apple refuses a token older than
  an hour, and refreshing more often than every 20 minutes), then makes the next; a
  send that APNs answers ``ExpiredProviderToken`` replaces it once.
- FCM: an RS256 *assertion* (``iss`` the service account's email, ``scope``, ``aud``
  the token URI, ``iat``, ``exp``) signed with the service account's key, traded for
  an OAuth 2.0 access token (:mod:`.fcm`).

Bad input: :func:`load_apns_key` and :func:`load_service_account` raise
:class:`ChatConfigError` naming what is wrong (a malformed key, a missing field), so a
server refuses bad credentials when it starts, not on its first push. Nothing here
does I/O or awaits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from sandstream.server.chat.model import ChatConfigError

__all__ = [
    "APNS_TOKEN_LIFETIME",
    "ApnsAuthKey",
    "ApnsProviderTokens",
    "ServiceAccount",
    "google_assertion",
    "load_apns_key",
    "load_service_account",
]

APNS_TOKEN_LIFETIME = 50 * 60.0
"""Seconds a provider token is used before the next one is made (APNs: at most 1 h)."""

_ASSERTION_LIFETIME = 3600
"""Seconds a Google assertion is valid (Google's maximum)."""


@dataclass(frozen=True)
class ApnsAuthKey:
    """A team's APNs auth key: the ``.p8`` key, its key id and the team id."""

    team_id: str
    key_id: str
    private_key: ec.EllipticCurvePrivateKey


def load_apns_key(p8: str | bytes, *, key_id: str, team_id: str) -> ApnsAuthKey:
    """The auth key of a ``.p8`` file's text (PKCS#8 PEM, a P-256 key)."""
    for name, value in (("key id", key_id), ("team id", team_id)):
        if not value or not value.isalnum():
            raise ChatConfigError(f"the APNs {name} must be letters and digits, not {value!r}")
    key = _private_key(p8, "the APNs auth key (.p8)")
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ChatConfigError("the APNs auth key (.p8) is not a P-256 (ES256) key")
    return ApnsAuthKey(team_id=team_id, key_id=key_id, private_key=key)


class ApnsProviderTokens:
    """The provider token of one auth key: made on first use, reused until it is
    ``lifetime`` seconds old (by ``clock``, Unix time), replaced on demand.

    Share one among the senders of a key (production and development hosts alike):
    APNs counts a key's refreshes, not a connection's.
    """

    def __init__(
        self,
        key: ApnsAuthKey,
        *,
        lifetime: float = APNS_TOKEN_LIFETIME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.key = key
        self._lifetime = lifetime
        self._clock = clock
        self._token = ""
        self._issued_at = 0.0

    def current(self) -> str:
        """The token to send now."""
        now = self._clock()
        if not self._token or now - self._issued_at >= self._lifetime:
            self._make(now)
        return self._token

    def replace(self, stale: str) -> str:
        """The token to send after APNs refused ``stale`` as expired: a new one, unless
        another send replaced ``stale`` already."""
        if stale == self._token:
            self._make(self._clock())
        return self._token

    def _make(self, now: float) -> None:
        self._token = jwt.encode(
            {"iss": self.key.team_id, "iat": int(now)},
            self.key.private_key,
            algorithm="ES256",
            headers={"kid": self.key.key_id},
        )
        self._issued_at = now


@dataclass(frozen=True)
class ServiceAccount:
    """The fields of a Google service account's JSON key that FCM needs."""

    project_id: str
    client_email: str
    private_key_id: str | None
    private_key: rsa.RSAPrivateKey
    token_uri: str


def load_service_account(text: str | bytes) -> ServiceAccount:
    """The service account of a JSON key file's text (Google's
    ``"type": "service_account"`` format)."""
    try:
        fields: Any = json.loads(text)
    except ValueError as exc:
        raise ChatConfigError(f"the service account JSON is not JSON: {exc}") from exc
    if not isinstance(fields, dict):
        raise ChatConfigError("the service account JSON is not an object")

    def field(name: str) -> str:
        value = fields.get(name)
        if not isinstance(value, str) or not value:
            raise ChatConfigError(f'the service account JSON has no "{name}"')
        return value

    if (kind := field("type")) != "service_account":
        raise ChatConfigError(
            f'the service account JSON has "type": "{kind}", not "service_account"'
        )
    project_id, client_email, token_uri = (
        field("project_id"),
        field("client_email"),
        field("token_uri"),
    )
    if urlsplit(token_uri).scheme not in ("https", "http"):
        raise ChatConfigError(f'the service account\'s "token_uri" is not a URL: {token_uri!r}')
    key = _private_key(field("private_key"), 'the service account\'s "private_key"')
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ChatConfigError('the service account\'s "private_key" is not an RSA key')
    key_id = fields.get("private_key_id")
    return ServiceAccount(
        project_id=project_id,
        client_email=client_email,
        private_key_id=key_id if isinstance(key_id, str) and key_id else None,
        private_key=key,
        token_uri=token_uri,
    )


def google_assertion(account: ServiceAccount, *, scope: str, audience: str, now: float) -> str:
    """A JWT-bearer grant's assertion for ``scope``, addressed to ``audience`` (the
    token URI it is posted to), issued at ``now`` (Unix time)."""
    issued = int(now)
    headers = {} if account.private_key_id is None else {"kid": account.private_key_id}
    return jwt.encode(
        {
            "iss": account.client_email,
            "scope": scope,
            "aud": audience,
            "iat": issued,
            "exp": issued + _ASSERTION_LIFETIME,
        },
        account.private_key,
        algorithm="RS256",
        headers=headers,
    )


def _private_key(pem: str | bytes, what: str) -> object:
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        return load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ChatConfigError(f"{what} is not a PEM private key without a password: {exc}") from exc
