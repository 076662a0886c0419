"""Coverage-guided fuzzing of the push-subscription body (server/chat/api/push.py:
``POST /api/assistant/push/subscriptions``, and the Web Push subscription it checks,
server/chat/push/webpush.py).

    python -m tests.fuzz.push_subscription [CORPUS_DIR ...] [libFuzzer flags]

An input (:class:`~tests.fuzz.harness.Input`, one option byte; no cut points): byte 0
bit 0 says whether the stream is the request body itself or a recipe
(:class:`~tests.fuzz.values.Recipe`) that builds one: a workspace id, any of
``webPush`` (an endpoint built as the ``push_endpoint`` harness builds them, a real
P-256 key and auth secret, or either damaged: cut, padded, in standard base64,
compressed), ``apnsToken`` and ``fcmToken``, other fields and values of the wrong
type. :func:`check` decodes the body as the route does (``decode_json`` into
``SubscribeRequest``) and reads its device (:func:`read_subscription`, with an
endpoint policy): each step raises ``BadRequestError`` with a 422 and nothing else,
and what is accepted keeps the rules by a reference of the harness's own: exactly one
device; a Web Push endpoint the policy accepts, ``p256dh`` base64url of a point on
P-256, ``auth`` base64url of 16 bytes; an APNs token of 16 to 200 hex digits; an FCM
token as given. The accepted body encodes back to JSON that decodes the same.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any, Final

import atheris
import msgspec
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

with atheris.instrument_imports(
    include=["sandstream.server.chat.api.push", "sandstream.server.chat.push.webpush"]
):
    from sandstream.server.chat.api.push import SubscribeRequest, read_subscription
    from sandstream.server.chat.push import EndpointPolicy, PushEndpointRefusedError
    from sandstream.server.http import BadRequestError
    from sandstream.server.http.requests import decode_json

from tests.fuzz.harness import Input, fuzz
from tests.fuzz.push_endpoint import ALLOWED
from tests.fuzz.push_endpoint import generate as generate_endpoint
from tests.fuzz.values import Recipe

__all__ = ["SubscriptionMismatch", "check", "generate"]

POLICY: Final = EndpointPolicy(ALLOWED)
_POINT: Final = (
    ec.derive_private_key(7, ec.SECP256R1())
    .public_key()
    .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
)
_COMPRESSED: Final = (
    ec.derive_private_key(7, ec.SECP256R1())
    .public_key()
    .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint)
)
_AUTH: Final = bytes(range(16))
_GOOD_ENDPOINT: Final = "https://fcm.googleapis.com/fcm/send/abc"


class SubscriptionMismatch(AssertionError):
    """The body was accepted against a rule, refused otherwise than with a 422, or
    read differently."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64url(text: str) -> bytes | None:
    """The reference's base64url: ``[A-Za-z0-9_-]``, padded with ``=`` or not."""
    bare = text.rstrip("=")
    if not re.fullmatch(r"[A-Za-z0-9_-]*", bare, re.ASCII) or len(bare) % 4 == 1:
        return None
    return base64.urlsafe_b64decode(bare + "=" * (-len(bare) % 4))


def _on_p256(data: bytes) -> bool:
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), data)
    except ValueError:
        return False
    return True


def _refusal(error: BadRequestError, what: str) -> None:
    if error.response.status_code != 422:
        raise SubscriptionMismatch(f"{what}: answered {error.response.status_code}, not 422")


def _check_device(body: SubscribeRequest) -> None:
    given = [x is not None for x in (body.web_push, body.apns_token, body.fcm_token)]
    try:
        device = read_subscription(body, POLICY)
    except BadRequestError as error:
        _refusal(error, f"{body!r}")
        return
    if sum(given) != 1:
        raise SubscriptionMismatch(f"{body!r}: accepted with {sum(given)} devices")
    if body.web_push is not None:
        endpoint, keys = body.web_push.endpoint, body.web_push.keys
        if (device.kind, device.address) != ("webpush", endpoint):
            raise SubscriptionMismatch(f"{body!r} read as {device!r}")
        if (device.p256dh, device.auth) != (keys.p256dh, keys.auth):
            raise SubscriptionMismatch(f"{body!r}: keys read as {device!r}")
        try:
            POLICY.check(endpoint)
        except PushEndpointRefusedError as refused:
            raise SubscriptionMismatch(f"{endpoint!r} accepted, though {refused.reason}") from None
        point, auth = _unb64url(keys.p256dh), _unb64url(keys.auth)
        if point is None or not _on_p256(point):
            raise SubscriptionMismatch(f"p256dh {keys.p256dh!r} accepted")
        if auth is None or len(auth) != 16:
            raise SubscriptionMismatch(f"auth {keys.auth!r} accepted")
    elif body.apns_token is not None:
        token = body.apns_token
        hex_digits = re.fullmatch(r"[0-9A-Fa-f]{16,200}", token, re.ASCII) is not None
        if (device.kind, device.address) != ("apns", token) or not hex_digits:
            raise SubscriptionMismatch(f"apnsToken {token!r} read as {device!r}")
    elif (device.kind, device.address) != ("fcm", body.fcm_token):
        raise SubscriptionMismatch(f"fcmToken {body.fcm_token!r} read as {device!r}")


def check(data: bytes) -> None:
    case = Input.decode(data, 1)
    raw = generate(Recipe(case.stream)) if case.options[0] & 1 else case.stream
    try:
        body = decode_json(raw, SubscribeRequest)
    except BadRequestError as error:
        _refusal(error, f"{raw[:200]!r}")
        return
    again = decode_json(msgspec.json.encode(body), SubscribeRequest)
    if again != body:
        raise SubscriptionMismatch(f"{body!r} encodes to what decodes as {again!r}")
    _check_device(body)


def _key(recipe: Recipe, good: bytes) -> Any:
    kind = recipe.number(0, 9)
    if kind <= 3:
        return _b64url(good)
    if kind == 4:
        return _b64url(good) + str(recipe.pick("=", "==", "===", "\n", " "))
    if kind == 5:
        return base64.b64encode(good).decode()  # standard base64, + and / and padding
    if kind == 6:
        cut = recipe.number(0, len(good))
        return _b64url(good[:cut])
    if kind == 7:
        return _b64url(_COMPRESSED if good is _POINT else good + b"\0")
    if kind == 8:
        return recipe.pick(None, 7, [], "", "\U0001f600")
    return recipe.text()


def generate(recipe: Recipe) -> bytes:
    """A subscription body built from the pieces of good and bad ones."""
    body: dict[str, Any] = {}
    if recipe.number(0, 7):
        bad = recipe.number(0, 3) == 0
        body["workspaceId"] = recipe.pick("", "a" * 300, 5, None, "a b") if bad else "ws1"
    which = recipe.number(0, 7)
    if which & 1 or which == 0:
        push: dict[str, Any] = {}
        if recipe.number(0, 7):
            endpoint = generate_endpoint(recipe) if recipe.flag() else _GOOD_ENDPOINT
            push["endpoint"] = endpoint if recipe.number(0, 7) else recipe.pick(None, 1, "")
        if recipe.number(0, 7):
            push["keys"] = {"p256dh": _key(recipe, _POINT), "auth": _key(recipe, _AUTH)}
        if recipe.flag():
            push["expirationTime"] = recipe.pick(None, 0, 1.5, 2**40, "soon")
        body["webPush"] = push
    if which & 2:
        bad = recipe.number(0, 3) == 0
        token = recipe.pick("ab" * 101, "zz" * 16, "", 5, "ab" * 7) if bad else "ab" * 16
        body["apnsToken"] = token if bad or recipe.flag() else recipe.text(200)
    if which & 4:
        bad = recipe.number(0, 3) == 0
        body["fcmToken"] = recipe.pick("", "x" * 5000, None, ["a"]) if bad else recipe.text()
    if recipe.number(0, 5) == 0:
        body[recipe.text(8)] = recipe.value(1)
    return json.dumps(body, ensure_ascii=recipe.flag()).encode("utf-8", "surrogatepass")


def test_one_input(data: bytes) -> None:
    check(data)


def seeds() -> Iterator[bytes]:
    keys = {"p256dh": _b64url(_POINT), "auth": _b64url(_AUTH)}
    for body in (
        {"workspaceId": "ws1", "webPush": {"endpoint": _GOOD_ENDPOINT, "keys": keys}},
        {"workspaceId": "ws1", "webPush": {"endpoint": "http://127.0.0.1/", "keys": keys}},
        {"workspaceId": "ws1", "apnsToken": "0123456789abcdef" * 4},
        {"workspaceId": "ws1", "fcmToken": "f:token"},
        {"workspaceId": "ws1", "fcmToken": "f", "apnsToken": "0123456789abcdef"},
        {"workspaceId": "ws1"},
    ):
        yield Input(b"\0", (), json.dumps(body).encode()).encode()
    yield Input(b"\0", (), b"[1,").encode()
    yield Input(b"\1", (), bytes(range(64))).encode()


if __name__ == "__main__":
    fuzz(test_one_input, seeds)
