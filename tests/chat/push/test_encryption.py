"""aes128gcm push message encryption (RFC 8291, RFC 8188): the RFC's example to the
byte, round trips through an independent decryptor (``http_ece``), the size limit,
and the subscriptions it refuses."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st

from sandstream.server.chat.push.webpush import (
    MAX_PAYLOAD,
    RECORD_SIZE,
    WebPushPayloadTooLargeError,
    WebPushSubscription,
    WebPushSubscriptionError,
    encrypt_aes128gcm,
    encrypt_message,
)
from tests.support.push_services import Browser

# RFC 8291 section 5 (and its appendix A): the example's inputs and its message body.
RFC_PLAINTEXT = b"When I grow up, I want to be a watermelon"
RFC_UA_PUBLIC = (
    "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
)
RFC_UA_PRIVATE = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
RFC_AS_PRIVATE = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
RFC_AUTH_SECRET = "BTBZMqHH6r4Tts7J_aSIgg"
RFC_SALT = "DGv6ra1nlYgDCS1FRnbzlw"
RFC_BODY = (
    "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_"
    "yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
)


def _bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _private_key(text: str) -> ec.EllipticCurvePrivateKey:
    return ec.derive_private_key(int.from_bytes(_bytes(text), "big"), ec.SECP256R1())


RFC_BROWSER = Browser(
    WebPushSubscription(
        "https://push.example.net/push/JzLQ3raZJfFBR0aqvOMsLrt54w4rJUsV",
        RFC_UA_PUBLIC,
        RFC_AUTH_SECRET,
    ),
    _private_key(RFC_UA_PRIVATE),
    _bytes(RFC_AUTH_SECRET),
    application_server_key="",
)


def test_the_rfc_8291_example_encrypts_to_the_rfc_body() -> None:
    ua_public, auth_secret = RFC_BROWSER.subscription.keys()
    body = encrypt_aes128gcm(
        RFC_PLAINTEXT,
        ua_public,
        auth_secret,
        salt=_bytes(RFC_SALT),
        sender_key=_private_key(RFC_AS_PRIVATE),
    )
    assert body == _bytes(RFC_BODY)


def test_the_browser_side_decrypts_the_rfc_body() -> None:
    assert RFC_BROWSER.decrypt(_bytes(RFC_BODY)) == RFC_PLAINTEXT


@given(st.binary(max_size=MAX_PAYLOAD))
def test_any_payload_up_to_the_limit_round_trips(payload: bytes) -> None:
    body = encrypt_message(payload, RFC_BROWSER.subscription)
    assert len(body) <= RECORD_SIZE
    assert RFC_BROWSER.decrypt(body) == payload


def test_the_largest_payload_fills_a_4096_byte_message() -> None:
    body = encrypt_message(b"x" * MAX_PAYLOAD, RFC_BROWSER.subscription)
    assert len(body) == RECORD_SIZE == 4096
    assert RFC_BROWSER.decrypt(body) == b"x" * MAX_PAYLOAD


@given(st.integers(min_value=MAX_PAYLOAD + 1, max_value=1 << 20))
def test_a_payload_over_the_limit_is_refused(size: int) -> None:
    with pytest.raises(WebPushPayloadTooLargeError, match=f"at most {MAX_PAYLOAD} bytes") as caught:
        encrypt_message(b"\x00" * size, RFC_BROWSER.subscription)
    assert caught.value.size == size


def test_each_message_has_its_own_salt_and_key() -> None:
    first = encrypt_message(RFC_PLAINTEXT, RFC_BROWSER.subscription)
    second = encrypt_message(RFC_PLAINTEXT, RFC_BROWSER.subscription)
    assert first[:16] != second[:16] and first[21:86] != second[21:86]


@pytest.mark.parametrize(
    ("endpoint", "p256dh", "auth", "reason"),
    [
        ("ftp://push.example.net/x", RFC_UA_PUBLIC, RFC_AUTH_SECRET, "http"),
        ("https:///x", RFC_UA_PUBLIC, RFC_AUTH_SECRET, "host"),
        ("https://push.example.net/x", RFC_UA_PUBLIC[:-4], RFC_AUTH_SECRET, "p256dh"),
        ("https://push.example.net/x", "BA" + "A" * 85, RFC_AUTH_SECRET, "p256dh"),
        ("https://push.example.net/x", RFC_UA_PUBLIC, "not*base64", "auth"),
        ("https://push.example.net/x", RFC_UA_PUBLIC, RFC_AUTH_SECRET[:-2], "not 16"),
    ],
)
def test_a_subscription_that_cannot_work_is_refused(
    endpoint: str, p256dh: str, auth: str, reason: str
) -> None:
    with pytest.raises(WebPushSubscriptionError, match=reason):
        WebPushSubscription(endpoint, p256dh, auth)
