"""Web Push: sends one encrypted push message to a browser's push subscription.

RFC 8030 (the request: ``POST`` to the subscription's endpoint with ``TTL``, ``Urgency``
and ``Topic``), RFC 8292 (VAPID: an ES256 JWT for the endpoint's origin in
``Authorization: vapid t=…, k=…``) and RFC 8291 (the payload encrypted to the
browser's ``p256dh`` key and ``auth`` secret, ``Content-Encoding: aes128gcm`` of
RFC 8188 in one record), written on ``cryptography`` (the JWT signed by PyJWT).
:class:`WebPushSender` sends, retried by :func:`~.retry.send_with_retries` on 429, 5xx
and transport errors, and raises the errors of :mod:`.errors` for the caller to act on.
Where it sends is checked first (:mod:`.endpoints`): the endpoint's URL, then every
address its name resolves to, and the request goes to the address checked; a redirect
is refused, never followed, and at most :data:`ANSWER_LIMIT` bytes of an answer are
read.

Bad input raises before anything is sent: malformed subscription keys or endpoint
(:class:`WebPushSubscriptionError`), an endpoint the server does not send to
(:class:`~.errors.PushEndpointRefusedError`), a payload over :data:`MAX_PAYLOAD`
(:class:`WebPushPayloadTooLargeError`), a key that is not a P-256 private key
(:class:`VapidKeyError`). Cancelling a send stops it at once, in a request or in a
wait between tries; the push service may or may not have taken the message.
"""

from __future__ import annotations

import base64
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import httpx
import jwt
import trio
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .client import ANSWER_LIMIT, bounded_send
from .endpoints import EndpointPolicy, IPAddress, pinned_request
from .errors import (
    PushEndpointRefusedError,
    PushError,
    PushRejectedError,
    PushSubscriptionGoneError,
    PushUnavailableError,
)
from .notification import web_push_topic
from .retry import RetryPolicy, send_with_retries

__all__ = [
    "ANSWER_LIMIT",
    "MAX_PAYLOAD",
    "MAX_TOKEN_LIFETIME",
    "RECORD_SIZE",
    "Urgency",
    "VapidKey",
    "VapidKeyError",
    "WebPushPayloadTooLargeError",
    "WebPushSender",
    "WebPushSubscription",
    "WebPushSubscriptionError",
    "encrypt_aes128gcm",
    "encrypt_message",
]

Urgency = Literal["very-low", "low", "normal", "high"]

RECORD_SIZE = 4096
"""The ``rs`` of the one aes128gcm record, and the largest body a push service must
take (RFC 8291 section 4)."""

_HEADER_SIZE = 16 + 4 + 1 + 65  # salt, rs, idlen, keyid (the sender's public key)
_TAG_SIZE = 16

MAX_PAYLOAD = RECORD_SIZE - _HEADER_SIZE - _TAG_SIZE - 1
"""The largest plaintext one push message carries: 3993 bytes (4096 less the header,
the AEAD tag and the padding delimiter)."""

MAX_TOKEN_LIFETIME = 24 * 3600
"""RFC 8292: a VAPID JWT's ``exp`` is at most 24 hours ahead."""

_ERROR_BODY_LIMIT = 500  # characters of a refusal's body kept in the exception
_CURVE = ec.SECP256R1()
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


class VapidKeyError(PushError, ValueError):
    """A VAPID key that cannot be read, or is not a P-256 (prime256v1) private key."""


class WebPushSubscriptionError(PushError, ValueError):
    """A subscription whose endpoint is not an http(s) URL, or whose ``p256dh`` is not
    a P-256 point or ``auth`` not 16 bytes (base64url): no message can reach it."""


class WebPushPayloadTooLargeError(PushError, ValueError):
    """A payload over :data:`MAX_PAYLOAD` bytes: it does not fit one push message."""

    def __init__(self, size: int) -> None:
        super().__init__(
            f"a push message carries at most {MAX_PAYLOAD} bytes of payload, not {size}"
        )
        self.size = size


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    """Decode base64url, padded or not; :class:`ValueError` on anything else."""
    bare = text.rstrip("=")
    if not _BASE64URL.fullmatch(bare) or len(bare) % 4 == 1:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(bare + "=" * (-len(bare) % 4))


def _public_bytes(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )


class VapidKey:
    """The application server's VAPID key pair (ECDSA on P-256).

    The browser subscribes with :attr:`application_server_key`; the push service then
    takes only messages whose ``Authorization`` (:meth:`authorization`) this key signed.
    """

    def __init__(self, private_key: ec.EllipticCurvePrivateKey) -> None:
        if not isinstance(private_key.curve, ec.SECP256R1):
            raise VapidKeyError(f"a VAPID key is on P-256, not {private_key.curve.name}")
        self._private_key = private_key
        self.application_server_key = _b64url(_public_bytes(private_key.public_key()))
        """The public key as the browser's ``applicationServerKey`` takes it (base64url
        of the uncompressed point), and as the ``k=`` of :meth:`authorization`."""

    @classmethod
    def generate(cls) -> VapidKey:
        """A new random key pair."""
        return cls(ec.generate_private_key(_CURVE))

    @classmethod
    def from_pem(cls, pem: bytes) -> VapidKey:
        """The key of an unencrypted PEM private key (PKCS #8 ``PRIVATE KEY`` or SEC 1
        ``EC PRIVATE KEY``, as ``openssl ecparam -name prime256v1 -genkey`` writes)."""
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as error:
            raise VapidKeyError(f"not an unencrypted PEM private key: {error}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise VapidKeyError("a VAPID key is an EC private key on P-256")
        return cls(key)

    @classmethod
    def from_pem_file(cls, path: str | os.PathLike[str]) -> VapidKey:
        """:meth:`from_pem` of the file at ``path`` (read at once: call it at start-up)."""
        try:
            pem = Path(path).read_bytes()
        except OSError as error:
            raise VapidKeyError(f"cannot read the VAPID key file {path}: {error}") from None
        return cls.from_pem(pem)

    @classmethod
    def from_raw(cls, private_key: str) -> VapidKey:
        """The key whose private scalar is ``private_key``: 32 bytes, base64url (the form
        web-push tools print as the "private key")."""
        try:
            scalar = _unb64url(private_key.strip())
            if len(scalar) != 32:
                raise ValueError(f"{len(scalar)} bytes, not 32")
            key = ec.derive_private_key(int.from_bytes(scalar, "big"), _CURVE)
        except ValueError as error:
            raise VapidKeyError(f"not a raw P-256 private key: {error}") from None
        return cls(key)

    def private_pem(self) -> bytes:
        """The private key as unencrypted PKCS #8 PEM (for :meth:`from_pem`)."""
        return self._private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def authorization(self, audience: str, subject: str, expires_at: int) -> str:
        """The ``Authorization`` header value: ``vapid t=<JWT>, k=<public key>``, the JWT
        signed with ES256 over ``aud`` (the endpoint's origin), ``exp`` (Unix time)
        and ``sub`` (a ``mailto:`` or ``https:`` contact)."""
        token = jwt.encode(
            {"aud": audience, "exp": expires_at, "sub": subject},
            self._private_key,
            algorithm="ES256",
            headers={"typ": "JWT"},
        )
        return f"vapid t={token}, k={self.application_server_key}"


@dataclass(frozen=True)
class WebPushSubscription:
    """A browser's push subscription, as ``PushSubscription.toJSON()`` gives it:
    the ``endpoint`` URL and the ``keys`` ``p256dh`` and ``auth`` (base64url).

    Made only valid: raises :class:`WebPushSubscriptionError` otherwise.
    """

    endpoint: str
    p256dh: str
    auth: str

    def __post_init__(self) -> None:
        self.origin()
        self.keys()

    def origin(self) -> str:
        """The endpoint's origin (``scheme://host[:port]``), the JWT's ``aud``."""
        try:
            url = httpx.URL(self.endpoint)
        except httpx.InvalidURL as error:
            raise WebPushSubscriptionError(f"the endpoint is not a URL: {error}") from None
        if url.scheme not in ("https", "http") or not url.raw_host:
            raise WebPushSubscriptionError("the endpoint is not an http(s) URL with a host")
        return f"{url.scheme}://{url.netloc.decode('ascii')}"

    def keys(self) -> tuple[ec.EllipticCurvePublicKey, bytes]:
        """The browser's public key and its auth secret."""
        try:
            public_key = ec.EllipticCurvePublicKey.from_encoded_point(
                _CURVE, _unb64url(self.p256dh)
            )
        except ValueError as error:
            raise WebPushSubscriptionError(f"p256dh is not a P-256 public key: {error}") from None
        try:
            auth_secret = _unb64url(self.auth)
        except ValueError as error:
            raise WebPushSubscriptionError(f"auth is not base64url: {error}") from None
        if len(auth_secret) != 16:
            raise WebPushSubscriptionError(f"auth is {len(auth_secret)} bytes, not 16")
        return public_key, auth_secret


def encrypt_aes128gcm(
    plaintext: bytes,
    ua_public: ec.EllipticCurvePublicKey,
    auth_secret: bytes,
    *,
    salt: bytes,
    sender_key: ec.EllipticCurvePrivateKey,
) -> bytes:
    """The push message body carrying ``plaintext`` to the user agent whose key is
    ``ua_public``, with the given ``salt`` (16 bytes) and ephemeral ``sender_key``
    (RFC 8291 section 3, one record of RFC 8188 of size :data:`RECORD_SIZE`).

    Deterministic: :func:`encrypt_message` draws the salt and key; this form is for
    test vectors. Raises :class:`WebPushPayloadTooLargeError` past :data:`MAX_PAYLOAD`.
    """
    if len(plaintext) > MAX_PAYLOAD:
        raise WebPushPayloadTooLargeError(len(plaintext))
    if len(salt) != 16:
        raise ValueError("the salt is 16 bytes")
    ua_bytes = _public_bytes(ua_public)
    sender_bytes = _public_bytes(sender_key.public_key())
    ecdh_secret = sender_key.exchange(ec.ECDH(), ua_public)
    ikm = HKDF(
        hashes.SHA256(), 32, salt=auth_secret, info=b"WebPush: info\0" + ua_bytes + sender_bytes
    ).derive(ecdh_secret)
    cek = HKDF(hashes.SHA256(), 16, salt=salt, info=b"Content-Encoding: aes128gcm\0").derive(ikm)
    nonce = HKDF(hashes.SHA256(), 12, salt=salt, info=b"Content-Encoding: nonce\0").derive(ikm)
    # The last (here the only) record ends with the delimiter 0x02, and no padding.
    record = AESGCM(cek).encrypt(nonce, plaintext + b"\x02", None)
    header = salt + RECORD_SIZE.to_bytes(4, "big") + bytes([len(sender_bytes)]) + sender_bytes
    return header + record


def encrypt_message(plaintext: bytes, subscription: WebPushSubscription) -> bytes:
    """:func:`encrypt_aes128gcm` to ``subscription`` with a random salt and a new
    ephemeral key."""
    ua_public, auth_secret = subscription.keys()
    return encrypt_aes128gcm(
        plaintext,
        ua_public,
        auth_secret,
        salt=os.urandom(16),
        sender_key=ec.generate_private_key(_CURVE),
    )


class WebPushSender:
    """Sends push messages signed with ``key``, naming ``contact`` (``mailto:`` or
    ``https:``) in the JWT, on ``client`` (its timeouts bound each request), to the
    endpoints ``endpoints`` lets through (default: public ``https`` hosts only).

    ``token_lifetime``: seconds from signing to the JWT's ``exp`` (at most
    :data:`MAX_TOKEN_LIFETIME`); ``policy``: the retries (:class:`RetryPolicy`).
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        key: VapidKey,
        contact: str,
        *,
        token_lifetime: int = 12 * 3600,
        policy: RetryPolicy | None = None,
        endpoints: EndpointPolicy | None = None,
    ) -> None:
        if not contact.startswith(("mailto:", "https:")):
            raise ValueError("the VAPID contact is a mailto: or https: URI")
        if not 0 < token_lifetime <= MAX_TOKEN_LIFETIME:
            raise ValueError(f"a VAPID token lives 1 to {MAX_TOKEN_LIFETIME} seconds")
        self.client = client
        self.key = key
        self.contact = contact
        self.token_lifetime = token_lifetime
        self.policy = policy or RetryPolicy()
        self.endpoints = endpoints or EndpointPolicy()

    async def send(
        self,
        subscription: WebPushSubscription,
        payload: bytes,
        *,
        ttl: int,
        urgency: Urgency = "normal",
        collapse_key: str | None = None,
    ) -> None:
        """Send ``payload`` to ``subscription``; return once the push service took it.

        ``ttl``: seconds the push service keeps the message for a device that is
        offline (0: deliver now or never); ``urgency``: RFC 8030's; ``collapse_key``:
        a message with the same key replaces this one while it waits
        (:func:`~.notification.web_push_topic`).

        Raises :class:`PushSubscriptionGoneError` (404/410: remove the subscription),
        :class:`PushRejectedError` (another 4xx),
        :class:`~.errors.PushUnavailableError` (retries ran out, or the name could not
        be looked up within the retries' time),
        :class:`~.errors.PushEndpointRefusedError` (an endpoint the policy refuses,
        before sending; a redirect, not followed), or before sending
        :class:`WebPushPayloadTooLargeError` and :class:`ValueError` for a bad ``ttl``
        or ``urgency``.
        """
        if ttl < 0:
            raise ValueError("the TTL is 0 or more seconds")
        if urgency not in get_args(Urgency):
            raise ValueError(f"the urgency is one of {', '.join(get_args(Urgency))}")
        endpoint = self.endpoints.check(subscription.endpoint)
        body = encrypt_message(payload, subscription)
        expires_at = int(time.time()) + self.token_lifetime
        headers = {
            "Authorization": self.key.authorization(
                subscription.origin(), self.contact, expires_at
            ),
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
            "TTL": str(ttl),
            "Urgency": urgency,
            "Accept-Encoding": "identity",
        }
        if collapse_key is not None:
            headers["Topic"] = web_push_topic(collapse_key)

        resolved: IPAddress | None = None
        with trio.move_on_after(self.policy.total):
            resolved = await self.endpoints.resolve(endpoint)
        if resolved is None:
            raise PushUnavailableError(
                f"the push service's name {endpoint.host} was not looked up in "
                f"{self.policy.total:g} s"
            )
        address = resolved

        async def send_once() -> httpx.Response:
            request = pinned_request(self.client, endpoint, address, content=body, headers=headers)
            return await bounded_send(self.client, request, ANSWER_LIMIT)

        response = await send_with_retries(send_once, self.policy)
        if response.is_success:
            return
        if response.is_redirect:
            raise PushEndpointRefusedError(
                "redirect",
                f"the push service answered {response.status_code} (to "
                f"{response.headers.get('location', '?')[:200]!r}): redirects are not followed",
            )
        detail = response.text[:_ERROR_BODY_LIMIT]
        if response.status_code in (404, 410):
            raise PushSubscriptionGoneError(detail, status=response.status_code)
        raise PushRejectedError(response.status_code, detail)
