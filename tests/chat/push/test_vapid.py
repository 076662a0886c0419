"""VAPID keys and tokens (RFC 8292), and the Topic made from a collapse key: keys from
``openssl``, a raw scalar or a new one; JWTs PyJWT verifies; keys refused."""

from __future__ import annotations

import base64
import re
import subprocess
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st

from sandstream.server.chat.push.notification import web_push_topic
from sandstream.server.chat.push.webpush import VapidKey, VapidKeyError

# RFC 8291 section 5's application server key pair, raw private and public.
RFC_AS_PRIVATE = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
RFC_AS_PUBLIC = (
    "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
)

_TOPIC = re.compile(r"[A-Za-z0-9_-]{32}")


def _verify(authorization: str, audience: str) -> dict[str, object]:
    """The claims of a ``vapid t=…, k=…`` value, verified against its own ``k``."""
    scheme, _, rest = authorization.partition(" ")
    params = dict(p.strip().split("=", 1) for p in rest.split(","))
    assert scheme == "vapid" and set(params) == {"t", "k"}
    point = base64.urlsafe_b64decode(params["k"] + "=" * (-len(params["k"]) % 4))
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    assert jwt.get_unverified_header(params["t"]) == {"typ": "JWT", "alg": "ES256"}
    claims: dict[str, object] = jwt.decode(
        params["t"], key=key, algorithms=["ES256"], audience=audience
    )
    return claims


def test_a_raw_private_key_gives_its_public_key() -> None:
    assert VapidKey.from_raw(RFC_AS_PRIVATE).application_server_key == RFC_AS_PUBLIC


def test_a_new_key_signs_tokens_its_public_key_verifies() -> None:
    key = VapidKey.generate()
    expires_at = int(time.time()) + 3600
    authorization = key.authorization(
        "https://push.example.net", "mailto:ops@example.org", expires_at
    )
    assert authorization.endswith(f", k={key.application_server_key}")
    claims = _verify(authorization, "https://push.example.net")
    assert claims == {
        "aud": "https://push.example.net",
        "exp": expires_at,
        "sub": "mailto:ops@example.org",
    }
    point = base64.urlsafe_b64decode(key.application_server_key + "=")
    assert len(point) == 65 and point[0] == 4


def test_a_pem_file_from_openssl_loads(tmp_path: Path) -> None:
    path = tmp_path / "vapid.pem"
    subprocess.run(
        ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(path)],
        check=True,
    )
    assert path.read_text().startswith("-----BEGIN EC PRIVATE KEY-----")
    key = VapidKey.from_pem_file(path)
    public_pem = subprocess.run(
        ["openssl", "ec", "-in", str(path), "-pubout"], check=True, capture_output=True
    ).stdout
    public_key = serialization.load_pem_public_key(public_pem)
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    expected = public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    assert base64.urlsafe_b64decode(key.application_server_key + "=") == expected
    assert _verify(
        key.authorization("https://a.example", "https://ops.example", 2**31), "https://a.example"
    )


def test_a_generated_key_round_trips_through_pem() -> None:
    key = VapidKey.generate()
    again = VapidKey.from_pem(key.private_pem())
    assert again.application_server_key == key.application_server_key


def test_keys_that_are_not_p256_private_keys_are_refused(tmp_path: Path) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(VapidKeyError, match="P-256"):
        VapidKey.from_pem(p384)
    with pytest.raises(VapidKeyError, match="PEM"):
        VapidKey.from_pem(b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    with pytest.raises(VapidKeyError, match="cannot read"):
        VapidKey.from_pem_file(tmp_path / "missing.pem")
    with pytest.raises(VapidKeyError, match="not 32"):
        VapidKey.from_raw(RFC_AS_PRIVATE[:-3])
    with pytest.raises(VapidKeyError, match="raw"):
        VapidKey.from_raw("A" * 43)  # the scalar 0 is no key


def test_a_long_collapse_key_gives_a_valid_stable_topic() -> None:
    collapse_key = "chat:01J9Z8Q4W6X3 turn/ended " * 20
    topic = web_push_topic(collapse_key)
    assert _TOPIC.fullmatch(topic)
    assert topic == web_push_topic(collapse_key) == "GzSMDEmlvKKo9nflV7PikOtzApLAYoVa"
    assert web_push_topic(collapse_key + "!") != topic


@given(st.text())
def test_any_collapse_key_gives_a_valid_topic(collapse_key: str) -> None:
    assert _TOPIC.fullmatch(web_push_topic(collapse_key))
