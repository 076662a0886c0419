"""Loopback stand-ins for Apple's push service (APNs) and Firebase Cloud Messaging,
checking requests as the real services do, for the push senders' tests.

- :class:`ApnsServer` speaks APNs's provider API over HTTP/2 with TLS (a throwaway CA's
  certificate for 127.0.0.1) and refuses HTTP/1.1. It has its own team key (``p8``,
  ``key_id``, ``team_id``) and checks each ES256 provider token against it (signature,
  ``kid``, ``iss``, ``iat`` no older than an hour), then ``apns-topic``,
  ``apns-push-type``, ``apns-priority``, ``apns-expiration``, the collapse id's length
  and the payload, answering with APNs's reasons.
- :class:`FcmServer` speaks FCM's HTTP v1 API and Google's OAuth 2.0 token endpoint
  over HTTP/1.1. It has its own service account (:meth:`FcmServer.service_account_json`)
  and checks each RS256 assertion against it before it issues an access token, then
  the bearer and the message's shape on ``messages:send``, answering with Google's
  error bodies.

Both record every request they answer (``attempts``) and every delivery
(``deliveries``), and are told to fail: :meth:`unregister` a device token, answer
``status`` the next ``times`` requests (:meth:`fail`), APNs to refuse the next provider
token as expired or never to answer the next request, FCM to forget its access tokens.
They run in the nursery they are started in; cancelling it stops them. A request they
cannot read gets the service's ``400``.
"""

from __future__ import annotations

import functools
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from quart import Response, request
from quart_trio import QuartTrio

from benchmarks.support.redis_server import TlsFiles
from benchmarks.support.servers import serve_app

__all__ = [
    "ApnsDelivery",
    "ApnsServer",
    "Attempt",
    "FcmServer",
    "start_apns_server",
    "start_fcm_server",
]

_FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_APNS_TOKEN_MAX_AGE = 3600
_CLOCK_SKEW = 60
_APNS_PAYLOAD_BYTES = 4096
_GOOGLE_REASONS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_APNS_REASONS = {429: "TooManyRequests", 500: "InternalServerError", 503: "ServiceUnavailable"}


@dataclass(frozen=True)
class Attempt:
    """One request a stand-in answered: its status, the reason it gave (``""`` on
    success) and the credential it carried (provider token or access token)."""

    status: int
    reason: str
    credential: str


@dataclass(frozen=True)
class ApnsDelivery:
    """A notification APNs accepted: the device token, the request's headers
    (lower-case names, no ``authorization``) and the decoded payload."""

    device_token: str
    headers: dict[str, str]
    payload: dict[str, Any]


@dataclass
class _Failures:
    """Answers queued ahead of the real ones: ``status`` for the next ``times``
    requests, with ``Retry-After: retry_after`` when given."""

    status: int = 0
    times: int = 0
    retry_after: str | None = None

    def take(self) -> tuple[int, str | None] | None:
        if self.times == 0:
            return None
        self.times -= 1
        return self.status, self.retry_after


@dataclass
class _Recorder:
    attempts: list[Attempt] = field(default_factory=list)
    failures: _Failures = field(default_factory=_Failures)
    unregistered: dict[str, int] = field(default_factory=dict)

    def fail(self, status: int, times: int, retry_after: str | None = None) -> None:
        """Answer ``status`` to the next ``times`` requests (``retry_after``: the
        ``Retry-After`` header's value)."""
        self.failures = _Failures(status, times, retry_after)


class ApnsServer(_Recorder):
    """The stand-in APNs of one team and one app (``topic``)."""

    def __init__(self, topic: str) -> None:
        super().__init__()
        self.url = ""
        self.topic = topic
        self.team_id = "TEAM" + secrets.token_hex(3).upper()
        self.key_id = "KEY" + secrets.token_hex(4).upper()[:7]
        key = ec.generate_private_key(ec.SECP256R1())
        self.p8 = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        self._public_key = key.public_key()
        self.deliveries: list[ApnsDelivery] = []
        self._expire_next_token = False
        self._hold: trio.Event | None = None

    def unregister(self, device_token: str, status: int = 410) -> None:
        """Refuse ``device_token`` from now on: ``410 Unregistered``, or with ``status``
        400, ``BadDeviceToken`` (a development build's token sent to production)."""
        self.unregistered[device_token.lower()] = status

    def expire_provider_token_once(self) -> None:
        """Answer the next request that has a valid token ``403 ExpiredProviderToken``."""
        self._expire_next_token = True

    def hold_next(self) -> trio.Event:
        """Never answer the next request; the event is set when it has arrived."""
        self._hold = trio.Event()
        return self._hold

    def app(self) -> QuartTrio:
        app = QuartTrio(__name__)

        @app.route("/<path:path>", methods=["GET", "POST", "PUT", "DELETE"])
        async def route(path: str) -> Response:
            credential = request.headers.get("authorization", "")
            status, reason, headers = await self._answer("/" + path, credential)
            self.attempts.append(Attempt(status, reason, credential.removeprefix("bearer ")))
            body: dict[str, object] = {"reason": reason} if reason else {}
            if status == 410:
                body["timestamp"] = int(time.time() * 1000)
            headers["apns-id"] = request.headers.get("apns-id") or str(uuid.uuid4()).upper()
            return Response(json.dumps(body) if body else "", status, headers)

        return app

    async def _answer(self, path: str, authorization: str) -> tuple[int, str, dict[str, str]]:
        """The status, reason and extra headers of the answer to this request."""
        if request.http_version != "2":
            return 505, "HTTP/2 is required", {}
        device_token = path.removeprefix("/3/device/")
        if request.method != "POST":
            return 405, "MethodNotAllowed", {}
        if device_token == path:
            return 404, "BadPath", {}
        if self._hold is not None:
            arrived, self._hold = self._hold, None
            arrived.set()
            await trio.sleep_forever()
        queued = self.failures.take()
        if queued is not None:
            status, retry_after = queued
            extra = {} if retry_after is None else {"retry-after": retry_after}
            return status, _APNS_REASONS.get(status, "ServiceUnavailable"), extra
        token_problem = self._provider_token_problem(authorization)
        if token_problem is not None:
            return 403, token_problem, {}
        if self._expire_next_token:
            self._expire_next_token = False
            return 403, "ExpiredProviderToken", {}
        body = await request.get_data(cache=True, as_text=False, parse_form_data=False)
        problem = self._request_problem(device_token, body)
        if problem is not None:
            return 413 if problem == "PayloadTooLarge" else 400, problem, {}
        unregistered = self.unregistered.get(device_token.lower())
        if unregistered is not None:
            return unregistered, "Unregistered" if unregistered == 410 else "BadDeviceToken", {}
        headers = {name.lower(): value for name, value in request.headers.items()}
        headers.pop("authorization", None)
        self.deliveries.append(ApnsDelivery(device_token, headers, json.loads(body)))
        return 200, "", {}

    def _provider_token_problem(self, authorization: str) -> str | None:
        if not authorization.startswith("bearer "):
            return "MissingProviderToken"
        token = authorization.removeprefix("bearer ")
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(
                token, self._public_key, algorithms=["ES256"], options={"verify_iat": False}
            )
        except jwt.InvalidTokenError:
            return "InvalidProviderToken"
        issued = claims.get("iat")
        if header.get("kid") != self.key_id or claims.get("iss") != self.team_id:
            return "InvalidProviderToken"
        if not isinstance(issued, int) or issued > time.time() + _CLOCK_SKEW:
            return "InvalidProviderToken"
        if time.time() - issued > _APNS_TOKEN_MAX_AGE:
            return "ExpiredProviderToken"
        return None

    def _request_problem(self, device_token: str, body: bytes) -> str | None:
        """APNs's reason for refusing this request's headers, path or payload."""
        headers = request.headers
        topic = headers.get("apns-topic")
        push_type = headers.get("apns-push-type")
        priority = headers.get("apns-priority", "10")
        expiration = headers.get("apns-expiration", "0")
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        if not all(c in "0123456789abcdefABCDEF" for c in device_token) or not device_token:
            return "BadDeviceToken"
        if topic is None:
            return "MissingTopic"
        if topic != self.topic:
            return "DeviceTokenNotForTopic"
        if push_type not in ("alert", "background"):
            return "InvalidPushType"
        if priority not in ("5", "10") or (push_type == "background" and priority != "5"):
            return "BadPriority"
        if not expiration.isdigit():
            return "BadExpirationDate"
        if len(headers.get("apns-collapse-id", "").encode()) > 64:
            return "BadCollapseId"
        if len(body) > _APNS_PAYLOAD_BYTES:
            return "PayloadTooLarge"
        aps = payload.get("aps") if isinstance(payload, dict) else None
        if not isinstance(aps, dict):
            return "PayloadEmpty"
        if push_type == "background" and (aps.get("content-available") != 1 or "alert" in aps):
            return "BadPayload"
        if push_type == "alert" and not isinstance(aps.get("alert"), dict | str):
            return "BadPayload"
        return None


class FcmServer(_Recorder):
    """The stand-in FCM of one Firebase project, with its token endpoint (``/token``)."""

    def __init__(self, project_id: str) -> None:
        super().__init__()
        self.url = ""
        self.project_id = project_id
        self.client_email = f"push@{project_id}.iam.gserviceaccount.com"
        self.key_id = secrets.token_hex(20)
        self._key = _service_account_key()
        self.expires_in = 3599
        """The lifetime, in seconds, of the access tokens it issues from now on."""
        self.token_requests: list[Attempt] = []
        self.deliveries: list[dict[str, Any]] = []
        self._access_tokens: set[str] = set()

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    def service_account_json(self, **changes: Any) -> str:
        """The project's service account key file, with ``changes`` (``None``: drop)."""
        fields: dict[str, Any] = {
            "type": "service_account",
            "project_id": self.project_id,
            "private_key_id": self.key_id,
            "private_key": self._key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode(),
            "client_email": self.client_email,
            "client_id": "1" + secrets.token_hex(10),
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": self.token_uri,
        }
        fields |= changes
        return json.dumps({name: value for name, value in fields.items() if value is not None})

    def unregister(self, registration_token: str, status: int = 404) -> None:
        """Answer ``UNREGISTERED`` for ``registration_token`` from now on, with
        ``status`` (FCM answers 404, sometimes 400)."""
        self.unregistered[registration_token] = status

    def revoke_access_tokens(self) -> None:
        """Forget the access tokens issued so far: a request with one gets 401."""
        self._access_tokens.clear()

    def app(self) -> QuartTrio:
        app = QuartTrio(__name__)

        @app.route("/token", methods=["POST"])
        async def token() -> Response:
            form = await request.form
            problem = self._assertion_problem(form.get("grant_type"), form.get("assertion"))
            assertion = form.get("assertion", "")
            if problem is not None:
                self.token_requests.append(Attempt(400, problem[0], assertion))
                error = {"error": problem[0], "error_description": problem[1]}
                return Response(json.dumps(error), 400, {"content-type": "application/json"})
            access_token = "ya29." + secrets.token_urlsafe(32)
            self._access_tokens.add(access_token)
            self.token_requests.append(Attempt(200, "", assertion))
            answer = {
                "access_token": access_token,
                "expires_in": self.expires_in,
                "token_type": "Bearer",
            }
            return Response(json.dumps(answer), 200, {"content-type": "application/json"})

        @app.route("/v1/projects/<project_id>/<action>", methods=["POST"])
        async def send(project_id: str, action: str) -> Response:
            credential = request.headers.get("authorization", "").removeprefix("Bearer ")
            status, (reason, message), headers = await self._send(project_id, action, credential)
            self.attempts.append(Attempt(status, reason, credential))
            if status == 200:
                return Response(json.dumps({"name": message}), 200, headers)
            details = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError"}]
            details[0]["errorCode"] = reason
            error = {
                "code": status,
                "message": message,
                "status": _GOOGLE_REASONS.get(status, "UNKNOWN"),
                "details": details,
            }
            return Response(json.dumps({"error": error}), status, headers)

        return app

    def _assertion_problem(
        self, grant_type: str | None, assertion: str | None
    ) -> tuple[str, str] | None:
        """The OAuth error and description refusing this grant, if any."""
        if grant_type != _JWT_BEARER:
            return "unsupported_grant_type", f"Invalid grant_type: {grant_type}"
        if not assertion:
            return "invalid_request", "Missing required parameter: assertion"
        try:
            header = jwt.get_unverified_header(assertion)
            claims = jwt.decode(
                assertion,
                self._key.public_key(),
                algorithms=["RS256"],
                audience=self.token_uri,
                options={"require": ["iss", "aud", "iat", "exp", "scope"]},
                leeway=_CLOCK_SKEW,
            )
        except jwt.InvalidTokenError as exc:
            return "invalid_grant", f"Invalid JWT: {exc}"
        if header.get("kid", self.key_id) != self.key_id:
            return "invalid_grant", "Invalid JWT Signature."
        if claims["iss"] != self.client_email:
            return "invalid_grant", "Invalid email or User ID"
        if claims["exp"] - claims["iat"] > 3600:
            return "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes)"
        if _FCM_SCOPE not in str(claims["scope"]).split():
            return "invalid_scope", "The scope does not grant Firebase Cloud Messaging"
        return None

    async def _send(
        self, project_id: str, action: str, credential: str
    ) -> tuple[int, tuple[str, str], dict[str, str]]:
        """The status, (FCM error code, message) and extra headers of the answer."""
        json_type = {"content-type": "application/json"}
        if action != "messages:send":
            return 404, ("NOT_FOUND", f"no such method: {action}"), json_type
        queued = self.failures.take()
        if queued is not None:
            status, retry_after = queued
            extra = json_type if retry_after is None else json_type | {"retry-after": retry_after}
            code = "QUOTA_EXCEEDED" if status == 429 else "UNAVAILABLE"
            return status, (code, "The service is unavailable."), extra
        if credential not in self._access_tokens:
            return 401, ("THIRD_PARTY_AUTH_ERROR", "Request had invalid credentials."), json_type
        if project_id != self.project_id:
            return 403, ("SENDER_ID_MISMATCH", "Permission denied."), json_type
        try:
            body = json.loads(await request.get_data())
        except ValueError:
            return 400, ("INVALID_ARGUMENT", "Invalid JSON payload received."), json_type
        problem = _message_problem(body)
        if problem is not None:
            return 400, ("INVALID_ARGUMENT", problem), json_type
        message = body["message"]
        unregistered = self.unregistered.get(message["token"])
        if unregistered is not None:
            return unregistered, ("UNREGISTERED", "Requested entity was not found."), json_type
        self.deliveries.append(message)
        name = f"projects/{project_id}/messages/0:{secrets.token_hex(8)}"
        return 200, ("", name), json_type


_MESSAGE_FIELDS = {
    "name",
    "data",
    "notification",
    "android",
    "webpush",
    "apns",
    "fcm_options",
    "token",
    "topic",
    "condition",
}
_ANDROID_FIELDS = {
    "collapse_key",
    "priority",
    "ttl",
    "restricted_package_name",
    "data",
    "notification",
    "fcm_options",
    "direct_boot_ok",
}


def _message_problem(body: Any) -> str | None:
    """What is wrong with a ``messages:send`` body, as FCM would say it."""
    if not isinstance(body, dict) or set(body) - {"message", "validate_only"}:
        return "Invalid JSON payload received. Unknown name at the top level."
    message = body.get("message")
    if not isinstance(message, dict):
        return "Request contains an invalid argument: message"
    if unknown := set(message) - _MESSAGE_FIELDS:
        return f'Invalid JSON payload received. Unknown name "{sorted(unknown)[0]}" at message.'
    if [name for name in ("token", "topic", "condition") if name in message] != ["token"]:
        return "Exactly one of token, topic or condition is required (token here)."
    if not isinstance(message["token"], str) or not message["token"]:
        return "The registration token is not a valid FCM registration token"
    if not _strings(message.get("data", {})):
        return "message.data must map strings to strings"
    notification = message.get("notification", {})
    if not isinstance(notification, dict) or not _strings(notification):
        return "message.notification must be an object of strings"
    if set(notification) - {"title", "body", "image"}:
        return "Unknown name in message.notification"
    return _android_problem(message.get("android", {})) or _platform_problem(message)


def _android_problem(android: Any) -> str | None:
    if not isinstance(android, dict) or set(android) - _ANDROID_FIELDS:
        return "Unknown name in message.android"
    if android.get("priority", "NORMAL") not in ("NORMAL", "HIGH"):
        return f"Invalid value at 'message.android.priority': {android['priority']!r}"
    ttl = android.get("ttl", "0s")
    if not isinstance(ttl, str) or not ttl.endswith("s") or not _is_number(ttl[:-1]):
        return f"Invalid value at 'message.android.ttl' (google.protobuf.Duration): {ttl!r}"
    if not isinstance(android.get("collapse_key", ""), str):
        return "message.android.collapse_key must be a string"
    notification = android.get("notification", {})
    if not isinstance(notification, dict) or not _strings(notification):
        return "message.android.notification must be an object of strings"
    return None


def _platform_problem(message: dict[str, Any]) -> str | None:
    apns, webpush = message.get("apns", {}), message.get("webpush", {})
    if not isinstance(apns, dict) or set(apns) - {"headers", "payload", "fcm_options"}:
        return "Unknown name in message.apns"
    if not _strings(apns.get("headers", {})):
        return "message.apns.headers must map strings to strings"
    if len(apns.get("headers", {}).get("apns-collapse-id", "").encode()) > 64:
        return "apns-collapse-id is longer than 64 bytes"
    payload = apns.get("payload", {"aps": {}})
    if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
        return "message.apns.payload must have an aps dictionary"
    if not isinstance(webpush, dict) or set(webpush) - {
        "headers",
        "data",
        "notification",
        "fcm_options",
    }:
        return "Unknown name in message.webpush"
    if not _strings(webpush.get("headers", {})):
        return "message.webpush.headers must map strings to strings"
    return None


@functools.cache
def _service_account_key() -> rsa.RSAPrivateKey:
    """The stand-in FCM's key (one for the session: a 2048-bit RSA key takes a while)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _strings(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


async def start_apns_server(nursery: trio.Nursery, tls: TlsFiles, *, topic: str) -> ApnsServer:
    """An :class:`ApnsServer` for ``topic`` serving HTTPS with ``tls``'s server
    certificate in ``nursery``."""
    server = ApnsServer(topic)
    server.url = await serve_app(nursery, server.app(), tls=(tls.server_cert, tls.server_key))
    return server


async def start_fcm_server(nursery: trio.Nursery, *, project_id: str) -> FcmServer:
    """An :class:`FcmServer` for ``project_id`` serving plain HTTP in ``nursery``."""
    server = FcmServer(project_id)
    server.url = await serve_app(nursery, server.app())
    return server
