"""The Web Push sender against the loopback push service: a message arrives decrypted
and verified; the service's refusals, gone subscriptions and failures become the
sender's errors, retried as many times as the policy says."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
import trio

from sandstream.server.chat.push.endpoints import EndpointPolicy
from sandstream.server.chat.push.errors import (
    PushRejectedError,
    PushSubscriptionGoneError,
    PushUnavailableError,
)
from sandstream.server.chat.push.notification import web_push_topic
from sandstream.server.chat.push.retry import RetryPolicy
from sandstream.server.chat.push.webpush import (
    MAX_PAYLOAD,
    VapidKey,
    WebPushPayloadTooLargeError,
    WebPushSender,
    WebPushSubscription,
    encrypt_message,
)
from tests.chat.push.conftest import QUICK
from tests.support.push_services import Delivery, LoopbackPushService

CONTACT = "mailto:ops@example.org"
KEY = VapidKey.generate()


LOOPBACK = EndpointPolicy(["127.0.0.1"])
"""The operator's allow-list letting the loopback push service through."""


def _sender(client: httpx.AsyncClient, policy: RetryPolicy = QUICK) -> WebPushSender:
    return WebPushSender(client, KEY, CONTACT, policy=policy, endpoints=LOOPBACK)


async def test_a_message_arrives_decrypted_with_its_headers(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    payload = b'{"title":"Turn finished","chat":"c1"}'
    await _sender(client).send(
        browser.subscription, payload, ttl=600, urgency="high", collapse_key="chat c1, turn ended"
    )
    assert push_service.delivered_to(browser) == [
        Delivery(
            endpoint=browser.subscription.endpoint,
            plaintext=payload,
            ttl=600,
            urgency="high",
            topic=web_push_topic("chat c1, turn ended"),
        )
    ]
    assert push_service.attempts[browser.subscription.endpoint] == 1


async def test_without_a_collapse_key_no_topic_is_sent(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    await _sender(client).send(browser.subscription, b"", ttl=0)
    [delivery] = push_service.delivered_to(browser)
    assert (delivery.plaintext, delivery.ttl, delivery.urgency, delivery.topic) == (
        b"",
        0,
        "normal",
        None,
    )


async def test_a_message_signed_with_another_key_is_refused(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(VapidKey.generate().application_server_key)
    with pytest.raises(PushRejectedError) as caught:
        await _sender(client).send(browser.subscription, b"hello", ttl=60)
    assert caught.value.status == 403
    assert push_service.delivered_to(browser) == []
    assert push_service.attempts[browser.subscription.endpoint] == 1


async def test_a_gone_subscription_raises_gone(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    push_service.unsubscribe(browser)
    with pytest.raises(PushSubscriptionGoneError) as caught:
        await _sender(client).send(browser.subscription, b"hello", ttl=60)
    assert caught.value.status == 410
    assert push_service.attempts[browser.subscription.endpoint] == 1


async def test_an_unknown_endpoint_raises_gone(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    unknown = WebPushSubscription(
        browser.subscription.endpoint + "x", browser.subscription.p256dh, browser.subscription.auth
    )
    with pytest.raises(PushSubscriptionGoneError) as caught:
        await _sender(client).send(unknown, b"hello", ttl=60)
    assert caught.value.status == 404


async def test_a_429_with_retry_after_is_delivered_once_after_the_retry(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    push_service.fail(browser, 429, 1, retry_after="1")
    await _sender(client).send(browser.subscription, b"hello", ttl=60)
    assert [d.plaintext for d in push_service.delivered_to(browser)] == [b"hello"]
    assert push_service.attempts[browser.subscription.endpoint] == 2


async def test_503_forever_raises_unavailable_after_the_attempts(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    push_service.fail(browser, 503, 100)
    with pytest.raises(PushUnavailableError) as caught:
        await _sender(client).send(browser.subscription, b"hello", ttl=60)
    assert (caught.value.status, caught.value.attempts) == (503, QUICK.attempts)
    assert push_service.attempts[browser.subscription.endpoint] == QUICK.attempts
    assert push_service.delivered_to(browser) == []


async def test_a_retry_after_past_the_time_allowed_gives_up_at_once(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    push_service.fail(browser, 429, 1, retry_after="3600")
    with pytest.raises(PushUnavailableError, match="no time is left") as caught:
        await _sender(client).send(browser.subscription, b"hello", ttl=60)
    assert (caught.value.status, caught.value.attempts) == (429, 1)
    assert push_service.attempts[browser.subscription.endpoint] == 1


async def test_another_4xx_is_rejected_without_a_retry(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    push_service.fail(browser, 413, 1)
    with pytest.raises(PushRejectedError) as caught:
        await _sender(client).send(browser.subscription, b"hello", ttl=60)
    assert (caught.value.status, caught.value.reason) == (413, "scripted failure")
    assert push_service.attempts[browser.subscription.endpoint] == 1


async def test_a_payload_over_the_limit_is_never_sent(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    sender = _sender(client)
    with pytest.raises(WebPushPayloadTooLargeError):
        await sender.send(browser.subscription, b"x" * (MAX_PAYLOAD + 1), ttl=60)
    await sender.send(browser.subscription, b"x" * MAX_PAYLOAD, ttl=60)
    assert [len(d.plaintext) for d in push_service.delivered_to(browser)] == [MAX_PAYLOAD]
    assert push_service.attempts[browser.subscription.endpoint] == 1


async def test_cancelling_a_send_stops_it_at_once(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    push_service.fail(browser, 503, 100, retry_after="60")
    sender = _sender(client, RetryPolicy(attempts=5, total=600.0))
    with trio.fail_after(30):  # a safety net only: the cancel below ends the send
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                await sender.send(browser.subscription, b"hello", ttl=60)

            nursery.start_soon(send)
            await push_service.wait_for_attempts(browser, 1)
            nursery.cancel_scope.cancel()
    assert nursery.cancel_scope.cancelled_caught
    assert push_service.attempts[browser.subscription.endpoint] == 1
    assert push_service.delivered_to(browser) == []


def test_a_sender_needs_a_contact_and_a_token_lifetime_within_24_hours() -> None:
    with pytest.raises(ValueError, match="mailto"):
        WebPushSender(httpx.AsyncClient(), KEY, "ops@example.org")
    with pytest.raises(ValueError, match="86400"):
        WebPushSender(httpx.AsyncClient(), KEY, CONTACT, token_lifetime=86401)


# The service refuses what a push service refuses, so that the tests above mean something.


def _headers(
    service: LoopbackPushService,
    *,
    signer: VapidKey = KEY,
    aud: str | None = None,
    exp: int | None = None,
    sub: str = CONTACT,
    headers: dict[str, str | None] | None = None,
) -> dict[str, str]:
    """A push request's headers, valid unless changed: a JWT ``signer`` other than
    :data:`KEY` still names KEY in ``k=`` (only the signature gives it away)."""
    expires_at = int(time.time()) + 3600 if exp is None else exp
    token = signer.authorization(aud or service.origin, sub, expires_at).rpartition(", k=")[0]
    base: dict[str, str | None] = {
        "Authorization": f"{token}, k={KEY.application_server_key}",
        "TTL": "60",
        "Content-Encoding": "aes128gcm",
        "Content-Type": "application/octet-stream",
    }
    base.update(headers or {})
    return {name: value for name, value in base.items() if value is not None}


@pytest.mark.parametrize(
    ("changes", "status", "reason"),
    [
        ({}, 201, ""),
        ({"signer": VapidKey.generate()}, 403, "Signature verification failed"),
        ({"aud": "http://127.0.0.1:1"}, 403, "Audience"),
        ({"exp": int(time.time()) - 60}, 403, "expired"),
        ({"exp": int(time.time()) + 25 * 3600}, 403, "24 hours"),
        ({"sub": "ops@example.org"}, 403, "sub"),
        ({"headers": {"Authorization": None}}, 401, "missing"),
        ({"headers": {"Authorization": "WebPush abc"}}, 401, "missing"),
        ({"headers": {"TTL": None}}, 400, "TTL"),
        ({"headers": {"TTL": "-1"}}, 400, "TTL"),
        ({"headers": {"Urgency": "urgent"}}, 400, "Urgency"),
        ({"headers": {"Topic": "a" * 33}}, 400, "Topic"),
        ({"headers": {"Topic": "chat c1"}}, 400, "Topic"),
        ({"headers": {"Content-Encoding": "aesgcm"}}, 400, "aes128gcm"),
    ],
)
async def test_the_service_refuses_what_a_push_service_refuses(
    push_service: LoopbackPushService,
    client: httpx.AsyncClient,
    changes: dict[str, Any],
    status: int,
    reason: str,
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    response = await client.post(
        browser.subscription.endpoint,
        content=encrypt_message(b"hello", browser.subscription),
        headers=_headers(push_service, **changes),
    )
    assert response.status_code == status and reason in response.text, response.text
    assert len(push_service.delivered_to(browser)) == (1 if status == 201 else 0)


async def test_the_service_refuses_a_body_over_4096_bytes_or_one_it_cannot_decrypt(
    push_service: LoopbackPushService, client: httpx.AsyncClient
) -> None:
    browser = push_service.subscribe(KEY.application_server_key)
    other = push_service.subscribe(KEY.application_server_key)
    body = encrypt_message(b"hello", other.subscription)
    url = browser.subscription.endpoint
    too_large = await client.post(url, content=body + bytes(4000), headers=_headers(push_service))
    assert too_large.status_code == 413
    undecryptable = await client.post(url, content=body, headers=_headers(push_service))
    assert (undecryptable.status_code, "could not decrypt" in undecryptable.text) == (400, True)
    assert push_service.deliveries == []
