"""The configured push senders, one per service, behind one call:
:meth:`PushSenders.send` delivers a :class:`~.notification.Notification` to a stored
:class:`~sandstream.server.chat.model.PushSubscription` on the service it belongs to.

A Web Push message carries the notification as JSON (``title``, ``body``, ``tag`` = the
collapse key, ``silent``, and the notification's ``data``) for the web app's service
worker. Bad input: a subscription of a service that is not configured raises
:class:`~.errors.PushError`; :meth:`PushSenders.open` raises
:class:`~sandstream.server.chat.model.ChatConfigError` for unreadable credentials. Cancellation: as
the senders (a send stops at once); leaving closes every client, shielded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

from sandstream.server.chat.model import ChatConfigError, PushSubscription

from .apns import ApnsSender
from .endpoints import EndpointPolicy
from .errors import PushError, VapidUnconfiguredError
from .fcm import FcmSender
from .notification import Notification
from .settings import PushSettings
from .tokens import (
    ApnsAuthKey,
    ApnsProviderTokens,
    ServiceAccount,
    load_apns_key,
    load_service_account,
)
from .webpush import VapidKey, VapidKeyError, WebPushSender, WebPushSubscription

__all__ = ["PushCredentials", "PushSenders", "load_credentials", "web_push_payload"]


def web_push_payload(notification: Notification) -> bytes:
    """The JSON a Web Push message carries for the service worker."""
    return msgspec.json.encode(
        {
            "title": notification.title,
            "body": notification.body,
            "tag": notification.collapse_key,
            "silent": notification.silent,
            "data": dict(notification.data),
        }
    )


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ChatConfigError(f"cannot read the {what} {path}: {exc}") from None


@dataclass(frozen=True)
class PushCredentials:
    """The keys :class:`PushSettings` names, read and checked (``None``: not given)."""

    vapid: VapidKey | None
    apns: ApnsAuthKey | None
    fcm: ServiceAccount | None


def load_credentials(settings: PushSettings) -> PushCredentials:
    """Read and check the credential files of ``settings`` (blocking: call it at
    start-up). Raises :class:`~sandstream.server.chat.model.ChatConfigError` for one that cannot be
    read or is not a key of the right kind."""
    vapid = apns = fcm = None
    if settings.vapid_key_file is not None:
        try:
            vapid = VapidKey.from_pem(_read(settings.vapid_key_file, "VAPID key file"))
        except VapidKeyError as exc:
            raise ChatConfigError(f"the VAPID key file {settings.vapid_key_file}: {exc}") from None
    if settings.apns_key_file is not None:
        assert settings.apns_key_id is not None and settings.apns_team_id is not None
        apns = load_apns_key(
            _read(settings.apns_key_file, "APNs key file"),
            key_id=settings.apns_key_id,
            team_id=settings.apns_team_id,
        )
    if settings.fcm_service_account_file is not None:
        fcm = load_service_account(
            _read(settings.fcm_service_account_file, "FCM service account file")
        )
    return PushCredentials(vapid, apns, fcm)


class PushSenders:
    """The senders :meth:`open` made from :class:`PushSettings` (``None``: that service
    is not configured)."""

    def __init__(
        self,
        webpush: WebPushSender | None,
        apns: ApnsSender | None,
        fcm: FcmSender | None,
    ) -> None:
        self.webpush = webpush
        self.apns = apns
        self.fcm = fcm

    @classmethod
    @asynccontextmanager
    async def open(cls, settings: PushSettings) -> AsyncIterator[PushSenders]:
        """The senders of ``settings``, open until the block is left (the credentials
        read by :func:`load_credentials`; each send retried within
        ``settings.send_retries``; Web Push endpoints checked against
        ``settings.allow_hosts``)."""
        credentials = load_credentials(settings)
        policy = settings.send_retries
        async with AsyncExitStack() as stack:
            webpush = apns = fcm = None
            if credentials.vapid is not None:
                client = await stack.enter_async_context(httpx.AsyncClient(timeout=30.0))
                webpush = WebPushSender(
                    client,
                    credentials.vapid,
                    settings.vapid_contact,
                    policy=policy,
                    endpoints=EndpointPolicy(settings.allow_hosts),
                )
            if credentials.apns is not None:
                assert settings.apns_topic is not None
                apns = await stack.enter_async_context(
                    ApnsSender(
                        ApnsProviderTokens(credentials.apns),
                        topic=settings.apns_topic,
                        base_url=settings.apns_host,
                        policy=policy,
                    )
                )
            if credentials.fcm is not None:
                fcm = await stack.enter_async_context(
                    FcmSender(credentials.fcm, api_url=settings.fcm_api_url, policy=policy)
                )
            yield cls(webpush, apns, fcm)

    @property
    def vapid_public_key(self) -> str:
        """The ``applicationServerKey`` browsers subscribe with; raises
        :class:`VapidUnconfiguredError` without a VAPID key."""
        if self.webpush is None:
            raise VapidUnconfiguredError()
        return self.webpush.key.application_server_key

    def accepts(self, kind: str) -> bool:
        """Whether subscriptions of ``kind`` can be pushed to here."""
        return {"webpush": self.webpush, "apns": self.apns, "fcm": self.fcm}.get(kind) is not None

    async def send(self, subscription: PushSubscription, notification: Notification) -> None:
        """Deliver ``notification`` to ``subscription``; raises the senders' errors."""
        if subscription.kind == "webpush" and self.webpush is not None:
            assert subscription.p256dh is not None and subscription.auth is not None
            target = WebPushSubscription(
                subscription.address, subscription.p256dh, subscription.auth
            )
            await self.webpush.send(
                target,
                web_push_payload(notification),
                ttl=notification.ttl,
                urgency="normal" if notification.silent else "high",
                collapse_key=notification.collapse_key,
            )
        elif subscription.kind == "apns" and self.apns is not None:
            await self.apns.send(subscription.address, notification)
        elif subscription.kind == "fcm" and self.fcm is not None:
            await self.fcm.send(subscription.address, notification)
        else:
            raise PushError(f"no {subscription.kind} sender is configured here")
