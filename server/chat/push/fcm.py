"""Firebase Cloud Messaging: one notification to one registration token over FCM's
HTTP v1 API.

:class:`FcmSender` posts ``{"message": …}`` to
``/v1/projects/{project_id}/messages:send`` with a bearer access token from
:class:`GoogleAccessTokens`, which trades a service account's signed assertion for
one at the account's ``token_uri`` (the OAuth 2.0 JWT-bearer grant) and keeps it until
shortly before it expires. The message carries every platform's block (Android, APNs,
Web Push), each with the collapse key as that platform wants it.

Answers: 200 delivers; ``404`` or an ``UNREGISTERED`` error raise
:class:`PushSubscriptionGoneError`; ``401`` fetches a new access token and sends once
more; ``429`` and ``5xx`` (also from the token endpoint) are sent again
(:func:`send_with_retries`) until :class:`PushUnavailableError`; any other refusal,
also the token endpoint's, raises :class:`PushRejectedError`. Cancellation stops a send
at once (a token fetch cancelled halfway leaves no token: the next send fetches one);
leaving the sender closes its connections, shielded.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import httpx
import msgspec
import trio

from .apns import apns_request
from .client import OwnedClient
from .errors import (
    PushInDoubtError,
    PushRejectedError,
    PushSubscriptionGoneError,
    PushUnavailableError,
)
from .notification import Notification, web_push_topic
from .retry import RetryPolicy, send_with_retries
from .tokens import ServiceAccount, google_assertion

__all__ = ["FCM_API", "FCM_SCOPE", "FcmSender", "GoogleAccessTokens", "fcm_message"]

FCM_API: Final = "https://fcm.googleapis.com"
FCM_SCOPE: Final = "https://www.googleapis.com/auth/firebase.messaging"
_JWT_BEARER: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_EARLY = 300.0
"""Seconds before its expiry that an access token is replaced (a shorter-lived one
serves one send)."""

_Send = Callable[[Callable[[], Awaitable[httpx.Response]]], Awaitable[httpx.Response]]


class GoogleAccessTokens:
    """The access token of one service account for ``scope``, fetched from
    ``token_uri`` with ``client`` (retried by ``send``) when none is fresh."""

    def __init__(
        self,
        account: ServiceAccount,
        client: httpx.AsyncClient,
        send: _Send,
        *,
        scope: str = FCM_SCOPE,
        token_uri: str | None = None,
    ) -> None:
        self._account = account
        self._client = client
        self._send = send
        self._scope = scope
        self._token_uri = token_uri or account.token_uri
        self._token = ""
        self._renew_at = 0.0
        self._lock = trio.Lock()

    async def current(self) -> str:
        """A token that was fresh when fetched (one fetch at a time)."""
        async with self._lock:
            if not self._token or trio.current_time() >= self._renew_at:
                await self._fetch()
            return self._token

    async def replace(self, stale: str) -> str:
        """A token to use after ``stale`` was refused: a new one, unless another send
        replaced ``stale`` already."""
        async with self._lock:
            if stale == self._token:
                await self._fetch()
            return self._token

    async def _fetch(self) -> None:
        self._token = ""
        assertion = google_assertion(
            self._account, scope=self._scope, audience=self._token_uri, now=time.time()
        )
        form = {"grant_type": _JWT_BEARER, "assertion": assertion}

        async def post() -> httpx.Response:
            return await self._client.post(self._token_uri, data=form)

        try:
            response = await self._send(post)
        except PushInDoubtError as exc:  # only the token was asked for: no push went out
            raise PushUnavailableError(f"the token endpoint: {exc}") from None
        answer = _json_object(response)
        token, lifetime = answer.get("access_token"), answer.get("expires_in")
        if response.status_code != 200 or not isinstance(token, str) or not token:
            detail = " ".join(str(answer[k]) for k in ("error", "error_description") if k in answer)
            raise PushRejectedError(
                response.status_code,
                f"the token endpoint gave no access token: {detail or response.text[:200]}",
            )
        lifetime = lifetime if isinstance(lifetime, int) and lifetime > 0 else 3600
        self._token = token
        self._renew_at = trio.current_time() + lifetime - _EARLY


class FcmSender(OwnedClient):
    """Sends notifications through the FCM project of ``account``.

    Use as ``async with FcmSender(account) as fcm: await fcm.send(...)``. ``api_url``
    and ``token_uri`` replace FCM's and the account's endpoints; ``verify`` is the TLS
    trust; ``policy`` bounds the retries of one request (:class:`RetryPolicy`).
    """

    def __init__(
        self,
        account: ServiceAccount,
        *,
        api_url: str = FCM_API,
        token_uri: str | None = None,
        verify: ssl.SSLContext | bool = True,
        timeout: float = 30.0,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.project_id = account.project_id
        self._client = httpx.AsyncClient(verify=verify, timeout=timeout)
        self._send: _Send = functools.partial(send_with_retries, policy=policy or RetryPolicy())
        self._url = f"{api_url.rstrip('/')}/v1/projects/{account.project_id}/messages:send"
        self._tokens = GoogleAccessTokens(account, self._client, self._send, token_uri=token_uri)

    async def send(self, registration_token: str, notification: Notification) -> str:
        """Deliver ``notification`` to ``registration_token``; return FCM's message
        name (``projects/…/messages/…``)."""
        body = msgspec.json.encode(
            {"message": fcm_message(registration_token, notification, now=time.time())}
        )
        token = await self._tokens.current()
        response = await self._post(body, token)
        if response.status_code == 401:
            response = await self._post(body, await self._tokens.replace(token))
        if response.status_code == 200:
            return str(_json_object(response).get("name", ""))
        status, codes, message = _google_error(response)
        if response.status_code == 404 or "UNREGISTERED" in codes:
            raise PushSubscriptionGoneError(
                f"FCM: registration token {status}: {message}", status=response.status_code
            )
        raise PushRejectedError(response.status_code, f"{status} {' '.join(codes)}: {message}")

    async def _post(self, body: bytes, token: str) -> httpx.Response:
        """FCM's answer to one message under ``token``, retried while it is 429 or 5xx."""
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}

        async def post() -> httpx.Response:
            return await self._client.post(self._url, content=body, headers=headers)

        return await self._send(post)


def fcm_message(
    registration_token: str, notification: Notification, *, now: float
) -> dict[str, Any]:
    """The FCM v1 ``message`` that carries ``notification`` to ``registration_token``,
    sent at ``now`` (Unix time)."""
    silent, key = notification.silent, notification.collapse_key
    apns_headers, apns_payload = apns_request(notification, topic=None, now=now)
    message: dict[str, Any] = {"token": registration_token, "data": dict(notification.data)}
    android: dict[str, Any] = {
        "ttl": f"{notification.ttl}s",
        "priority": "NORMAL" if silent else "HIGH",
    }
    webpush: dict[str, Any] = {
        "headers": {"TTL": str(notification.ttl), "Urgency": "normal" if silent else "high"}
    }
    if not silent:
        shown = {"title": notification.title, "body": notification.body}
        message["notification"] = {name: value for name, value in shown.items() if value}
    if key is not None:
        android["collapse_key"] = key
        webpush["headers"]["Topic"] = web_push_topic(key)
        if not silent:  # a shown notification with the same tag replaces this one
            android["notification"] = {"tag": key}
            webpush["notification"] = {"tag": key}
    message["android"] = android
    message["apns"] = {"headers": apns_headers, "payload": {"aps": apns_payload["aps"]}}
    message["webpush"] = webpush
    return message


def _google_error(response: httpx.Response) -> tuple[str, list[str], str]:
    """A Google API error body's status, FCM error codes and message."""
    error = _json_object(response).get("error")
    if not isinstance(error, dict):
        return f"HTTP {response.status_code}", [], response.text[:200]
    details = error.get("details")
    codes = [
        detail["errorCode"]
        for detail in (details if isinstance(details, list) else [])
        if isinstance(detail, dict) and isinstance(detail.get("errorCode"), str)
    ]
    return str(error.get("status", "")), codes, str(error.get("message", ""))


def _json_object(response: httpx.Response) -> dict[str, Any]:
    """The response's body as a JSON object, or ``{}``."""
    try:
        value = msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}
