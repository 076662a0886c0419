"""Apple Push Notification service: one notification to one device token over APNs's
HTTP/2 provider API.

:class:`ApnsSender` posts ``/3/device/{token}`` on one HTTP/2 connection (httpx with
h2; APNs speaks nothing else), authorized by the provider token of
:class:`ApnsProviderTokens`, with the headers APNs routes on: ``apns-topic`` (the
app's bundle id), ``apns-push-type`` and ``apns-priority`` (``alert``/10, or
``background``/5 for a silent push), ``apns-expiration`` and ``apns-collapse-id``.

Answers: 200 delivers; ``410`` or ``400 BadDeviceToken`` raise
:class:`PushSubscriptionGoneError`; ``403 ExpiredProviderToken`` replaces the token
and sends once more; ``429`` and ``5xx`` are sent again (:func:`send_with_retries`)
until :class:`PushUnavailableError`; any other refusal raises
:class:`PushRejectedError`. Cancellation stops a send at once (APNs may have the push
already); leaving the sender closes its connection, shielded.
"""

from __future__ import annotations

import functools
import re
import ssl
import time
from typing import Any, Final

import httpx
import msgspec

from sandstream.server.chat.model import ChatConfigError

from .client import OwnedClient
from .errors import PushRejectedError, PushSubscriptionGoneError
from .notification import Notification, apns_collapse_id
from .retry import RetryPolicy, send_with_retries
from .tokens import ApnsProviderTokens

__all__ = ["APNS_DEVELOPMENT", "APNS_PRODUCTION", "ApnsSender", "apns_request"]

APNS_PRODUCTION: Final = "https://api.push.apple.com"
APNS_DEVELOPMENT: Final = "https://api.sandbox.push.apple.com"
"""The development host: the only one that knows device tokens of development builds."""

_DEVICE_TOKEN = re.compile(r"[0-9A-Fa-f]{16,200}")
_GONE_REASONS = frozenset({"BadDeviceToken", "Unregistered"})


class ApnsSender(OwnedClient):
    """Sends notifications for one app (``topic``: its bundle id) to ``base_url``.

    Use as ``async with ApnsSender(tokens, topic=...) as apns: await apns.send(...)``.
    ``verify`` is the TLS trust (an :class:`ssl.SSLContext` for a private CA);
    ``policy`` bounds the retries of one send (:class:`RetryPolicy`).
    """

    def __init__(
        self,
        tokens: ApnsProviderTokens,
        *,
        topic: str,
        base_url: str = APNS_PRODUCTION,
        verify: ssl.SSLContext | bool = True,
        timeout: float = 30.0,
        policy: RetryPolicy | None = None,
    ) -> None:
        if not base_url.startswith("https://"):
            raise ChatConfigError(f"the APNs base URL must be https://, not {base_url!r}")
        if not topic:
            raise ChatConfigError("the APNs topic (the app's bundle id) is empty")
        self.topic = topic
        self._tokens = tokens
        self._send = functools.partial(send_with_retries, policy=policy or RetryPolicy())
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), http1=False, http2=True, verify=verify, timeout=timeout
        )

    async def send(self, device_token: str, notification: Notification) -> str:
        """Deliver ``notification`` to ``device_token``; return APNs's ``apns-id``."""
        if not _DEVICE_TOKEN.fullmatch(device_token):
            raise PushSubscriptionGoneError(f"{device_token!r} is not an APNs device token")
        headers, payload = apns_request(notification, topic=self.topic, now=time.time())
        body = msgspec.json.encode(payload)
        path = f"/3/device/{device_token}"
        token = self._tokens.current()
        response = await self._post(path, body, headers, token)
        reason = _reason(response)
        if response.status_code == 403 and reason == "ExpiredProviderToken":
            response = await self._post(path, body, headers, self._tokens.replace(token))
            reason = _reason(response)
        if response.status_code == 200:
            return str(response.headers.get("apns-id", ""))
        if response.status_code == 410 or reason in _GONE_REASONS:
            raise PushSubscriptionGoneError(
                f"APNs: device token {reason}", status=response.status_code
            )
        raise PushRejectedError(response.status_code, reason)

    async def _post(
        self, path: str, body: bytes, headers: dict[str, str], token: str
    ) -> httpx.Response:
        """APNs's answer to one push under ``token``, retried while it is 429 or 5xx."""
        authorized = {**headers, "authorization": f"bearer {token}"}

        async def post() -> httpx.Response:
            return await self._client.post(path, content=body, headers=authorized)

        return await self._send(post)


def apns_request(
    notification: Notification, *, topic: str | None, now: float
) -> tuple[dict[str, str], dict[str, Any]]:
    """The headers (but ``authorization``; ``apns-topic`` if ``topic`` is given) and the
    payload that carry ``notification`` to APNs, sent at ``now`` (Unix time)."""
    silent = notification.silent
    headers = {} if topic is None else {"apns-topic": topic}
    headers |= {
        "apns-push-type": "background" if silent else "alert",
        "apns-priority": "5" if silent else "10",
        "apns-expiration": str(int(now) + notification.ttl if notification.ttl else 0),
    }
    if notification.collapse_key is not None:
        headers["apns-collapse-id"] = apns_collapse_id(notification.collapse_key)
    return headers, {**notification.data, "aps": _aps(notification)}


def _aps(notification: Notification) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if notification.silent:
        result["content-available"] = 1
    else:
        alert = {"title": notification.title, "body": notification.body}
        result["alert"] = {key: value for key, value in alert.items() if value}
    if notification.thread_id:
        result["thread-id"] = notification.thread_id
    return result


def _reason(response: httpx.Response) -> str:
    """The ``reason`` of an APNs error body, else the body's start."""
    try:
        reason = msgspec.json.decode(response.content).get("reason")
    except (msgspec.DecodeError, AttributeError):
        reason = None
    return reason if isinstance(reason, str) else response.text[:200]
