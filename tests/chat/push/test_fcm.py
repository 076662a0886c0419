"""The FCM sender against a stand-in FCM and Google token endpoint on loopback: the
message it sends, the access token's reuse and replacement, gone registration tokens,
retries, collapse ids, and service accounts refused when they are loaded."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from sandstream.server.chat.model.errors import ChatConfigError
from sandstream.server.chat.push.errors import (
    PushRejectedError,
    PushSubscriptionGoneError,
    PushUnavailableError,
)
from sandstream.server.chat.push.fcm import FcmSender
from sandstream.server.chat.push.notification import Notification, web_push_topic
from sandstream.server.chat.push.tokens import load_service_account
from tests.chat.push.conftest import QUICK
from tests.support.apns_fcm_services import FcmServer, start_fcm_server

PROJECT = "sandstream-test"
DEVICE = "fcm-registration-token:APA91b" + "x" * 100
ALERT = Notification(title="Turn finished", body="Done", collapse_key="chat-1")


@pytest.fixture
async def fcm(nursery: trio.Nursery) -> FcmServer:
    return await start_fcm_server(nursery, project_id=PROJECT)


@pytest.fixture
async def sender(fcm: FcmServer) -> AsyncIterator[FcmSender]:
    async with sender_for(fcm, fcm.service_account_json()) as opened:
        yield opened


def sender_for(fcm: FcmServer, account_json: str) -> FcmSender:
    """A sender to the stand-in, retrying 3 times without waiting."""
    return FcmSender(
        load_service_account(account_json),
        api_url=fcm.url,
        policy=QUICK,
    )


def statuses(fcm: FcmServer) -> list[int]:
    return [attempt.status for attempt in fcm.attempts]


async def test_an_alert_carries_every_platforms_block(fcm: FcmServer, sender: FcmSender) -> None:
    notification = Notification(
        title="Turn finished",
        body="Done: list the files",
        collapse_key="chat-1",
        thread_id="chat-1",
        data={"chat": "chat-1"},
        ttl=600,
    )
    before = int(time.time())
    name = await sender.send(DEVICE, notification)

    [message] = fcm.deliveries
    assert name.startswith(f"projects/{PROJECT}/messages/")
    expiration = int(message["apns"]["headers"].pop("apns-expiration"))
    assert before + 600 <= expiration <= int(time.time()) + 600
    assert message == {
        "token": DEVICE,
        "notification": {"title": "Turn finished", "body": "Done: list the files"},
        "data": {"chat": "chat-1"},
        "android": {
            "collapse_key": "chat-1",
            "ttl": "600s",
            "priority": "HIGH",
            "notification": {"tag": "chat-1"},
        },
        "apns": {
            "headers": {
                "apns-collapse-id": "chat-1",
                "apns-priority": "10",
                "apns-push-type": "alert",
            },
            "payload": {
                "aps": {
                    "alert": {"title": "Turn finished", "body": "Done: list the files"},
                    "thread-id": "chat-1",
                }
            },
        },
        "webpush": {
            "headers": {"Topic": web_push_topic("chat-1"), "TTL": "600", "Urgency": "high"},
            "notification": {"tag": "chat-1"},
        },
    }


async def test_a_silent_push_shows_nothing(fcm: FcmServer, sender: FcmSender) -> None:
    await sender.send(DEVICE, Notification(silent=True, collapse_key="chat-1", ttl=0))

    [message] = fcm.deliveries
    assert "notification" not in message
    assert message["android"] == {"collapse_key": "chat-1", "ttl": "0s", "priority": "NORMAL"}
    assert message["apns"] == {
        "headers": {
            "apns-collapse-id": "chat-1",
            "apns-priority": "5",
            "apns-push-type": "background",
            "apns-expiration": "0",
        },
        "payload": {"aps": {"content-available": 1}},
    }
    assert message["webpush"] == {
        "headers": {"Topic": web_push_topic("chat-1"), "TTL": "0", "Urgency": "normal"}
    }


async def test_one_access_token_serves_many_sends(fcm: FcmServer, sender: FcmSender) -> None:
    async with trio.open_nursery() as nursery:
        for number in range(5):
            nursery.start_soon(sender.send, f"{DEVICE}-{number}", ALERT)
    await sender.send(DEVICE, ALERT)

    assert len(fcm.deliveries) == 6
    [grant] = fcm.token_requests
    assert grant.status == 200
    assert len({attempt.credential for attempt in fcm.attempts}) == 1
    claims = jwt.decode(grant.credential, options={"verify_signature": False})
    assert claims["iss"] == fcm.client_email
    assert claims["aud"] == fcm.token_uri
    assert claims["scope"] == "https://www.googleapis.com/auth/firebase.messaging"
    assert claims["exp"] - claims["iat"] == 3600
    assert jwt.get_unverified_header(grant.credential)["kid"] == fcm.key_id


async def test_an_access_token_close_to_its_expiry_is_replaced(
    fcm: FcmServer, sender: FcmSender
) -> None:
    fcm.expires_in = 300  # no longer than the sender's margin: good for one send
    await sender.send(DEVICE, ALERT)
    await sender.send(DEVICE, ALERT)

    assert [grant.status for grant in fcm.token_requests] == [200, 200]
    assert fcm.attempts[0].credential != fcm.attempts[1].credential
    assert statuses(fcm) == [200, 200]


async def test_a_refused_access_token_is_replaced_and_the_push_sent_again(
    fcm: FcmServer, sender: FcmSender
) -> None:
    await sender.send(DEVICE, ALERT)
    fcm.revoke_access_tokens()
    await sender.send(DEVICE, ALERT)
    await sender.send(DEVICE, ALERT)

    assert statuses(fcm) == [200, 401, 200, 200]
    first, refused, replaced, reused = (attempt.credential for attempt in fcm.attempts)
    assert first == refused != replaced == reused
    assert len(fcm.token_requests) == 2
    assert len(fcm.deliveries) == 3


async def test_an_assertion_signed_with_another_key_gets_no_access_token(
    fcm: FcmServer,
) -> None:
    another_key = fcm.service_account_json(private_key=rsa_pem())
    async with sender_for(fcm, another_key) as sender:
        with pytest.raises(PushRejectedError, match="invalid_grant") as refused:
            await sender.send(DEVICE, ALERT)

    assert refused.value.status == 400
    assert [grant.status for grant in fcm.token_requests] == [400]
    assert fcm.attempts == []


@pytest.mark.parametrize("status", [404, 400])
async def test_an_unregistered_registration_token_is_gone(
    fcm: FcmServer, sender: FcmSender, status: int
) -> None:
    fcm.unregister(DEVICE, status)
    with pytest.raises(PushSubscriptionGoneError):
        await sender.send(DEVICE, ALERT)
    assert statuses(fcm) == [status]


async def test_another_refusal_is_rejected_with_googles_reason(fcm: FcmServer) -> None:
    account = fcm.service_account_json(project_id="another-project")
    async with sender_for(fcm, account) as sender:
        with pytest.raises(PushRejectedError, match="SENDER_ID_MISMATCH") as refused:
            await sender.send(DEVICE, ALERT)
    assert refused.value.status == 403
    assert statuses(fcm) == [403]


@pytest.mark.parametrize("retry_after", ["0", "Wed, 21 Oct 2015 07:28:00 GMT", None])
async def test_429_is_sent_again(
    fcm: FcmServer, sender: FcmSender, retry_after: str | None
) -> None:
    fcm.fail(429, times=2, retry_after=retry_after)
    await sender.send(DEVICE, ALERT)
    assert statuses(fcm) == [429, 429, 200]
    assert len(fcm.deliveries) == 1


async def test_503_until_the_attempts_run_out_is_unavailable(
    fcm: FcmServer, sender: FcmSender
) -> None:
    fcm.fail(503, times=100)
    with pytest.raises(PushUnavailableError, match="3 attempt"):
        await sender.send(DEVICE, ALERT)
    assert statuses(fcm) == [503, 503, 503]
    assert fcm.deliveries == []


async def test_a_long_collapse_key_becomes_stable_ids(fcm: FcmServer, sender: FcmSender) -> None:
    long_key = "workspace-7/chat-" + "x" * 80
    for key in (long_key, long_key, long_key + "!"):
        await sender.send(DEVICE, Notification(title="Question", collapse_key=key))

    apns_ids = [m["apns"]["headers"]["apns-collapse-id"] for m in fcm.deliveries]
    topics = [m["webpush"]["headers"]["Topic"] for m in fcm.deliveries]
    assert apns_ids[0] == apns_ids[1] != apns_ids[2]
    assert topics[0] == topics[1] != topics[2]
    assert all(len(collapse_id) <= 64 for collapse_id in apns_ids)
    assert all(
        len(topic) <= 32 and topic.replace("-", "").replace("_", "").isalnum() for topic in topics
    )
    assert [m["android"]["collapse_key"] for m in fcm.deliveries] == [
        long_key,
        long_key,
        long_key + "!",
    ]


def pem_of(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@functools.cache
def rsa_pem() -> str:
    return pem_of(rsa.generate_private_key(public_exponent=65537, key_size=2048))


def account_json(**changes: Any) -> str:
    """A well-formed service account key file, with ``changes`` (``None``: drop)."""
    fields: dict[str, Any] = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "0123abcd",
        "private_key": rsa_pem(),
        "client_email": f"push@{PROJECT}.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token",
    } | changes
    return json.dumps({name: value for name, value in fields.items() if value is not None})


def test_a_well_formed_service_account_loads() -> None:
    account = load_service_account(account_json())
    assert account.project_id == PROJECT
    assert account.token_uri == "https://oauth2.googleapis.com/token"
    assert account.private_key_id == "0123abcd"


@pytest.mark.parametrize(
    "missing", ["type", "project_id", "client_email", "private_key", "token_uri"]
)
def test_a_service_account_missing_a_field_is_refused_when_loaded(missing: str) -> None:
    with pytest.raises(ChatConfigError, match=f'has no "{missing}"'):
        load_service_account(account_json(**{missing: None}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not JSON"),
        ('["service_account"]', "not an object"),
        (account_json(type="authorized_user"), '"authorized_user", not "service_account"'),
        (account_json(private_key="-----BEGIN PRIVATE KEY-----\nAAAA\n"), "not a PEM private key"),
        (
            account_json(private_key=pem_of(ec.generate_private_key(ec.SECP256R1()))),
            "not an RSA key",
        ),
        (account_json(token_uri="oauth2.googleapis.com/token"), "not a URL"),
    ],
)
def test_a_malformed_service_account_is_refused_when_loaded(text: str, message: str) -> None:
    with pytest.raises(ChatConfigError, match=message):
        load_service_account(text)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"title": "x", "silent": True}, "shows nothing"),
        ({}, "needs a title or a body"),
        ({"title": "x", "data": {"google.sent": "1"}}, "reserved"),
        ({"title": "x", "data": {"aps": "1"}}, "reserved"),
        ({"title": "x", "data": {"count": 1}}, "strings to strings"),
        ({"title": "x", "ttl": -1}, "ttl"),
        ({"title": "x", "collapse_key": ""}, "empty"),
    ],
)
def test_a_notification_neither_service_takes_is_refused(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Notification(**fields)
