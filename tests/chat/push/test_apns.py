"""The APNs sender against a stand-in APNs on loopback (HTTP/2 over TLS, a throwaway
CA): what a delivery carries, the provider token's reuse and replacement, gone device
tokens, retries, collapse ids, and auth keys refused when they are loaded."""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Callable

import httpx
import jwt
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from benchmarks.support.redis_server import TlsFiles
from sandstream.server.chat.model.errors import ChatConfigError
from sandstream.server.chat.push.apns import ApnsSender
from sandstream.server.chat.push.errors import (
    PushRejectedError,
    PushSubscriptionGoneError,
    PushUnavailableError,
)
from sandstream.server.chat.push.notification import Notification
from sandstream.server.chat.push.tokens import ApnsProviderTokens, load_apns_key
from tests.chat.push.conftest import QUICK
from tests.support.apns_fcm_services import ApnsServer, start_apns_server

TOPIC = "dev.sandstream.app"
DEVICE = "0a1b2c3d" * 8
ALERT = Notification(title="Turn finished", body="Done: list the files", collapse_key="chat-1")


@pytest.fixture
async def apns(nursery: trio.Nursery, tls_files: TlsFiles) -> ApnsServer:
    return await start_apns_server(nursery, tls_files, topic=TOPIC)


@pytest.fixture
def tokens(apns: ApnsServer) -> ApnsProviderTokens:
    return ApnsProviderTokens(load_apns_key(apns.p8, key_id=apns.key_id, team_id=apns.team_id))


@pytest.fixture
async def sender(
    apns: ApnsServer, tokens: ApnsProviderTokens, tls_files: TlsFiles
) -> AsyncIterator[ApnsSender]:
    async with sender_for(apns, tokens, tls_files) as opened:
        yield opened


def sender_for(
    apns: ApnsServer, tokens: ApnsProviderTokens, tls_files: TlsFiles, *, topic: str = TOPIC
) -> ApnsSender:
    """A sender to the stand-in that trusts its CA, retrying 3 times without waiting."""
    trust = ssl.create_default_context(cafile=str(tls_files.ca))
    return ApnsSender(
        tokens,
        topic=topic,
        base_url=apns.url,
        verify=trust,
        policy=QUICK,
    )


def statuses(apns: ApnsServer) -> list[int]:
    return [attempt.status for attempt in apns.attempts]


async def test_an_alert_arrives_with_its_headers_and_payload(
    apns: ApnsServer, sender: ApnsSender
) -> None:
    notification = Notification(
        title="Turn finished",
        body="Done: list the files",
        collapse_key="chat-1",
        thread_id="chat-1",
        data={"chat": "chat-1", "message": "msg-9"},
        ttl=600,
    )
    before = int(time.time())
    apns_id = await sender.send(DEVICE, notification)

    [delivery] = apns.deliveries
    assert delivery.device_token == DEVICE
    assert apns_id and apns.attempts[0].status == 200
    headers = delivery.headers
    assert headers["apns-topic"] == TOPIC
    assert headers["apns-push-type"] == "alert"
    assert headers["apns-priority"] == "10"
    assert headers["apns-collapse-id"] == "chat-1"
    assert before + 600 <= int(headers["apns-expiration"]) <= int(time.time()) + 600
    assert delivery.payload == {
        "aps": {
            "alert": {"title": "Turn finished", "body": "Done: list the files"},
            "thread-id": "chat-1",
        },
        "chat": "chat-1",
        "message": "msg-9",
    }


async def test_a_silent_push_is_a_background_push(apns: ApnsServer, sender: ApnsSender) -> None:
    await sender.send(DEVICE, Notification(silent=True, collapse_key="chat-1", ttl=0))

    [delivery] = apns.deliveries
    assert delivery.headers["apns-push-type"] == "background"
    assert delivery.headers["apns-priority"] == "5"
    assert delivery.headers["apns-expiration"] == "0"
    assert delivery.payload == {"aps": {"content-available": 1}}


async def test_a_cancelled_send_leaves_the_connection_serving(
    apns: ApnsServer, sender: ApnsSender
) -> None:
    arrived = apns.hold_next()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.send, DEVICE, ALERT)
        await arrived.wait()
        nursery.cancel_scope.cancel()
    await sender.send(DEVICE, ALERT)

    assert statuses(apns) == [200]
    assert len(apns.deliveries) == 1


async def test_the_stand_in_refuses_http1(apns: ApnsServer, tls_files: TlsFiles) -> None:
    trust = ssl.create_default_context(cafile=str(tls_files.ca))
    async with httpx.AsyncClient(verify=trust) as client:
        response = await client.post(f"{apns.url}/3/device/{DEVICE}", json={"aps": {}})
    assert response.status_code == 505
    assert apns.deliveries == []


async def test_one_provider_token_serves_many_sends_on_one_connection(
    apns: ApnsServer, sender: ApnsSender
) -> None:
    async with trio.open_nursery() as nursery:
        for number in range(5):
            device = f"{number:02x}" * 32
            nursery.start_soon(sender.send, device, ALERT)
    await sender.send(DEVICE, ALERT)

    assert len(apns.deliveries) == 6
    assert len({attempt.credential for attempt in apns.attempts}) == 1
    token = apns.attempts[0].credential
    assert jwt.get_unverified_header(token) == {"alg": "ES256", "kid": apns.key_id, "typ": "JWT"}
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["iss"] == apns.team_id and set(claims) == {"iss", "iat"}


async def test_a_provider_token_is_replaced_after_fifty_minutes(
    apns: ApnsServer, tls_files: TlsFiles
) -> None:
    start = time.time() - 55 * 60
    now = [start]
    key = load_apns_key(apns.p8, key_id=apns.key_id, team_id=apns.team_id)
    tokens = ApnsProviderTokens(key, clock=lambda: now[0])
    async with sender_for(apns, tokens, tls_files) as sender:
        await sender.send(DEVICE, ALERT)  # a token issued 55 minutes ago by our clock
        now[0] = start + 49 * 60
        await sender.send(DEVICE, ALERT)  # 49 minutes old: reused
        now[0] = start + 50 * 60
        await sender.send(DEVICE, ALERT)  # 50 minutes old: replaced

    first, second, third = (attempt.credential for attempt in apns.attempts)
    assert first == second != third
    assert statuses(apns) == [200, 200, 200]


async def test_an_expired_provider_token_is_replaced_and_the_push_sent_again(
    apns: ApnsServer, sender: ApnsSender
) -> None:
    await sender.send(DEVICE, ALERT)
    apns.expire_provider_token_once()
    await sender.send(DEVICE, ALERT)
    await sender.send(DEVICE, ALERT)

    assert statuses(apns) == [200, 403, 200, 200]
    assert apns.attempts[1].reason == "ExpiredProviderToken"
    first, refused, replaced, reused = (attempt.credential for attempt in apns.attempts)
    assert first == refused != replaced == reused
    assert len(apns.deliveries) == 3


async def test_a_token_refused_as_expired_twice_is_rejected(
    apns: ApnsServer, tls_files: TlsFiles
) -> None:
    key = load_apns_key(apns.p8, key_id=apns.key_id, team_id=apns.team_id)
    two_hours_slow = ApnsProviderTokens(key, clock=lambda: time.time() - 7200)
    async with sender_for(apns, two_hours_slow, tls_files) as sender:
        with pytest.raises(PushRejectedError) as refused:
            await sender.send(DEVICE, ALERT)

    assert (refused.value.status, refused.value.reason) == (403, "ExpiredProviderToken")
    assert statuses(apns) == [403, 403]
    assert apns.attempts[0].credential != apns.attempts[1].credential


@pytest.mark.parametrize("status", [410, 400])
async def test_an_unregistered_or_bad_device_token_is_gone(
    apns: ApnsServer, sender: ApnsSender, status: int
) -> None:
    apns.unregister(DEVICE, status)
    with pytest.raises(PushSubscriptionGoneError, match=r"Unregistered|BadDeviceToken"):
        await sender.send(DEVICE, ALERT)
    assert statuses(apns) == [status]


async def test_a_string_that_is_no_device_token_is_gone_without_a_request(
    apns: ApnsServer, sender: ApnsSender
) -> None:
    with pytest.raises(PushSubscriptionGoneError):
        await sender.send("../../3/device/" + DEVICE, ALERT)
    assert apns.attempts == []


async def test_another_refusal_is_rejected_with_its_reason(
    apns: ApnsServer, tokens: ApnsProviderTokens, tls_files: TlsFiles
) -> None:
    async with sender_for(apns, tokens, tls_files, topic="dev.sandstream.other") as sender:
        with pytest.raises(PushRejectedError) as refused:
            await sender.send(DEVICE, ALERT)
    assert (refused.value.status, refused.value.reason) == (400, "DeviceTokenNotForTopic")
    assert statuses(apns) == [400]


@pytest.mark.parametrize("retry_after", ["0", "Wed, 21 Oct 2015 07:28:00 GMT", None])
async def test_429_is_sent_again(
    apns: ApnsServer, sender: ApnsSender, retry_after: str | None
) -> None:
    apns.fail(429, times=2, retry_after=retry_after)
    await sender.send(DEVICE, ALERT)
    assert statuses(apns) == [429, 429, 200]
    assert len(apns.deliveries) == 1


async def test_503_until_the_attempts_run_out_is_unavailable(
    apns: ApnsServer, sender: ApnsSender
) -> None:
    apns.fail(503, times=100, retry_after="0")
    with pytest.raises(PushUnavailableError, match="3 attempt"):
        await sender.send(DEVICE, ALERT)
    assert statuses(apns) == [503, 503, 503]
    assert apns.deliveries == []


async def test_a_long_collapse_key_becomes_a_stable_collapse_id(
    apns: ApnsServer, sender: ApnsSender
) -> None:
    long_key = "workspace-7/chat-" + "x" * 80
    wide_key = "tâche-" + "é" * 30  # 36 characters, 66 bytes
    for key in (long_key, long_key, wide_key, "t" * 64):
        await sender.send(DEVICE, Notification(title="Question", collapse_key=key))

    ids = [delivery.headers["apns-collapse-id"] for delivery in apns.deliveries]
    assert statuses(apns) == [200] * 4
    assert all(len(collapse_id.encode()) <= 64 for collapse_id in ids)
    assert ids[0] == ids[1] != ids[2]
    assert ids[3] == "t" * 64


def p8_of(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.mark.parametrize(
    ("p8", "message"),
    [
        (lambda: "not a key", "not a PEM private key"),
        (lambda: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "not a PEM"),
        (lambda: p8_of(rsa.generate_private_key(65537, 2048)), "not a P-256"),
        (lambda: p8_of(ec.generate_private_key(ec.SECP384R1())), "not a P-256"),
    ],
)
def test_a_malformed_auth_key_is_refused_when_loaded(
    p8: Callable[[], str | bytes], message: str
) -> None:
    with pytest.raises(ChatConfigError, match=message):
        load_apns_key(p8(), key_id="ABC123DEFG", team_id="TEAM123456")


@pytest.mark.parametrize(("key_id", "team_id"), [("", "TEAM123456"), ("ABC123DEFG", "TEAM 1")])
def test_a_malformed_key_or_team_id_is_refused_when_loaded(key_id: str, team_id: str) -> None:
    p8 = p8_of(ec.generate_private_key(ec.SECP256R1()))
    with pytest.raises(ChatConfigError, match="letters and digits"):
        load_apns_key(p8, key_id=key_id, team_id=team_id)
