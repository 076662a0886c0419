"""A loopback Web Push service, and the browsers subscribed to it, for tests.

:func:`start_push_service` serves a real HTTP push service (Quart-Trio on Hypercorn,
``127.0.0.1``) in the test's nursery. It takes a push message as a push service does
(RFC 8030, RFC 8292), refusing it otherwise:

- ``404`` for an unknown endpoint, ``410`` once its browser unsubscribed;
- the failures a test scripts with :meth:`LoopbackPushService.fail` (``429`` with a
  ``Retry-After``, ``503``…), answered before anything else is looked at;
- ``401`` without ``Authorization: vapid t=…, k=…``; ``403`` when ``k`` is not the key
  the browser subscribed with, the JWT's ES256 signature does not verify against it,
  its ``aud`` is not this service's origin, its ``exp`` is past or more than 24 hours
  ahead, or its ``sub`` is not a ``mailto:`` or ``https:`` URI;
- ``400`` without a valid ``TTL``, with an unknown ``Urgency``, a ``Topic`` that is not
  1-32 base64url characters, or a ``Content-Encoding`` other than ``aes128gcm``;
  ``413`` for a body over 4096 bytes.

Then it hands the message to the subscribed :class:`Browser`, which decrypts it with
its own private key and auth secret (RFC 8291), records a :class:`Delivery` and
answers ``201`` (or, told to :meth:`~LoopbackPushService.hold` the next answer to a
browser, never answers: the sender cannot know the browser had it). A body the
browser cannot decrypt is answered ``400`` (a real push service cannot tell, but a
test must fail). The service checks with libraries of its own, not the sender's code:
PyJWT for the JWT and ``http_ece`` for the decryption.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import http_ece
import jwt
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from quart import Response, request
from quart_trio import QuartTrio

from benchmarks.support.servers import serve_app
from sandstream.server.chat.push.webpush import WebPushSubscription

__all__ = ["Browser", "Delivery", "LoopbackPushService", "start_push_service"]

_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")
_URGENCIES = ("very-low", "low", "normal", "high")
_MAX_BODY = 4096
_MAX_EXP_AHEAD = 24 * 3600


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Delivery:
    """A push message the browser received: its plaintext and the request's headers."""

    endpoint: str
    plaintext: bytes
    ttl: int
    urgency: str | None
    topic: str | None


@dataclass
class Browser:
    """A user agent's side of one subscription: its key pair and auth secret, and the
    application server key it subscribed with (the only one the service accepts)."""

    subscription: WebPushSubscription
    private_key: ec.EllipticCurvePrivateKey
    auth_secret: bytes
    application_server_key: str

    def decrypt(self, body: bytes) -> bytes:
        """The plaintext of an ``aes128gcm`` push message body (``http_ece``)."""
        plaintext: bytes = http_ece.decrypt(
            body,
            private_key=self.private_key,
            auth_secret=self.auth_secret,
            version="aes128gcm",
        )
        return plaintext


@dataclass
class LoopbackPushService:
    """The push service's state; :attr:`origin` is set once it serves."""

    origin: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    attempts: Counter[str] = field(default_factory=Counter)
    """Requests each endpoint received, whatever was answered."""
    _browsers: dict[str, Browser] = field(default_factory=dict)
    _gone: set[str] = field(default_factory=set)
    _failures: dict[str, list[tuple[int, str | None]]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _arrivals: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)
    _held: dict[str, tuple[trio.Event, trio.Event | None]] = field(default_factory=dict)

    @property
    def host(self) -> str:
        """``127.0.0.1:port``: the allow-list entry (``--push-allow-host``) that lets
        the server send to this service."""
        return self.origin.split("://", 1)[1]

    def subscribe(self, application_server_key: str) -> Browser:
        """A new browser subscribed with ``application_server_key``."""
        private_key = ec.generate_private_key(ec.SECP256R1())
        public = private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        auth_secret = os.urandom(16)
        subscription = WebPushSubscription(
            endpoint=f"{self.origin}/push/{_b64url(os.urandom(12))}",
            p256dh=_b64url(public),
            auth=_b64url(auth_secret),
        )
        browser = Browser(subscription, private_key, auth_secret, application_server_key)
        self._browsers[subscription.endpoint] = browser
        return browser

    def unsubscribe(self, browser: Browser) -> None:
        """From now on, messages to ``browser``'s endpoint are answered ``410``."""
        self._gone.add(browser.subscription.endpoint)

    def fail(
        self, browser: Browser, status: int, times: int, *, retry_after: str | None = None
    ) -> None:
        """Answer the next ``times`` messages to ``browser`` with ``status`` (and this
        ``Retry-After``), after the failures already scripted."""
        scripted = self._failures.setdefault(browser.subscription.endpoint, [])
        scripted += [(status, retry_after)] * times

    def hold(self, browser: Browser, until: trio.Event | None = None) -> trio.Event:
        """Deliver the next message to ``browser`` but answer it only once ``until`` is
        set (``None``: never); the event returned is set once it was delivered."""
        delivered = trio.Event()
        self._held[browser.subscription.endpoint] = (delivered, until)
        return delivered

    def delivered_to(self, browser: Browser) -> list[Delivery]:
        """The deliveries to ``browser``, oldest first."""
        return [d for d in self.deliveries if d.endpoint == browser.subscription.endpoint]

    async def wait_for_attempts(self, browser: Browser, count: int) -> None:
        """Return once ``browser``'s endpoint has received ``count`` requests."""
        while self.attempts[browser.subscription.endpoint] < count:
            await self._arrivals.park()

    def app(self) -> QuartTrio:
        """The Quart-Trio application serving this push service."""
        app = QuartTrio(__name__)
        app.config["MAX_CONTENT_LENGTH"] = 1024 * 1024

        @app.post("/push/<token>")
        async def push(token: str) -> Response:
            endpoint = f"{self.origin}/push/{token}"
            self.attempts[endpoint] += 1
            self._arrivals.unpark_all()
            body = await request.get_data(cache=True, as_text=False, parse_form_data=False)
            answer = self._take(endpoint, body)
            if answer.status_code == 201 and endpoint in self._held:
                delivered, until = self._held.pop(endpoint)
                delivered.set()
                if until is None:
                    await trio.sleep_forever()  # until the sender leaves or the service stops
                await until.wait()
            return answer

        return app

    def _take(self, endpoint: str, body: bytes) -> Response:
        browser = self._browsers.get(endpoint)
        if browser is None:
            return Response("no such subscription", 404)
        if endpoint in self._gone:
            return Response("the subscription has expired or was cancelled", 410)
        scripted = self._failures.get(endpoint)
        if scripted:
            status, retry_after = scripted.pop(0)
            extra = {} if retry_after is None else {"Retry-After": retry_after}
            return Response("scripted failure", status, extra)
        refusal = self._check_vapid(browser) or self._check_headers(len(body))
        if refusal is not None:
            return refusal
        try:
            plaintext = browser.decrypt(body)
        except Exception as error:  # http_ece raises ECEException and cryptography's errors
            return Response(f"the user agent could not decrypt the message: {error!r}", 400)
        headers = request.headers
        self.deliveries.append(
            Delivery(
                endpoint=endpoint,
                plaintext=plaintext,
                ttl=int(headers["TTL"]),
                urgency=headers.get("Urgency"),
                topic=headers.get("Topic"),
            )
        )
        return Response("", 201, {"Location": f"{self.origin}/message/{next(self._ids)}"})

    def _check_vapid(self, browser: Browser) -> Response | None:
        scheme, _, rest = request.headers.get("Authorization", "").partition(" ")
        params = dict(p.strip().partition("=")[::2] for p in rest.split(","))
        if scheme.lower() != "vapid" or not params.get("t") or not params.get("k"):
            return Response("missing vapid authorization", 401)
        if params["k"] != browser.application_server_key:
            return Response("k is not the key this subscription is restricted to", 403)
        try:
            public_key = ec.EllipticCurvePublicKey.from_encoded_point(
                ec.SECP256R1(), _unb64url(params["k"])
            )
            claims = jwt.decode(
                params["t"],
                key=public_key,
                algorithms=["ES256"],
                audience=self.origin,
                options={"require": ["aud", "exp", "sub"]},
            )
        except (ValueError, jwt.InvalidTokenError) as error:
            return Response(f"invalid vapid token: {error}", 403)
        if claims["exp"] > time.time() + _MAX_EXP_AHEAD:
            return Response("the vapid token expires more than 24 hours ahead", 403)
        if not str(claims["sub"]).startswith(("mailto:", "https:")):
            return Response("the vapid sub is not a mailto: or https: URI", 403)
        return None

    def _check_headers(self, size: int) -> Response | None:
        headers = request.headers
        if not headers.get("TTL", "").isdigit():
            return Response("a TTL header (seconds) is required", 400)
        if headers.get("Urgency", "normal") not in _URGENCIES:
            return Response("unknown Urgency", 400)
        if "Topic" in headers and not _TOPIC.fullmatch(headers["Topic"]):
            return Response("a Topic is 1-32 base64url characters", 400)
        if headers.get("Content-Encoding") != "aes128gcm":
            return Response("the payload is encrypted with Content-Encoding: aes128gcm", 400)
        if size > _MAX_BODY:
            return Response(f"a push message is at most {_MAX_BODY} bytes", 413)
        return None


async def start_push_service(
    nursery: trio.Nursery, *, tls: tuple[Path, Path] | None = None, name: str = "127.0.0.1"
) -> LoopbackPushService:
    """Start a :class:`LoopbackPushService` on ``127.0.0.1:0`` in ``nursery``; with
    ``tls`` (a certificate and its key) over HTTPS, its endpoints naming the host
    ``name`` (which the certificate names)."""
    service = LoopbackPushService()
    served = await serve_app(nursery, service.app(), tls=tls)
    port = served.rsplit(":", 1)[1]
    service.origin = f"{'https' if tls else 'http'}://{name}:{port}"
    return service
