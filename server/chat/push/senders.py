"""The configured push senders, one per service, behind one call:
:meth:`PushSenders.send` delivers a :class:`~.notification.Notification` to a stored
:class:`~...records.PushSubscription` on the service it belongs to.

A Web Push message carries the notification as JSON (``title``, ``body``, ``tag`` = the
collapse key, ``silent``, and the notification's ``data``) for the web app's service
worker. Bad input: a subscription of a service that is not configured raises
:class:`~.errors.PushError`; :meth:`PushSenders.open` raises
:class:`~..errors.ChatConfigError` for unreadable credentials. Cancellation: as the
senders (a send stops at once); leaving closes every client, shielded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
import msgspec

from ..errors import ChatConfigError
from ..records import PushSubscription
from .apns import ApnsSender
from .errors import PushError, VapidUnconfiguredError
from .fcm import FcmSender
from .notification import Notification
from .settings import PushSettings
from .tokens import ApnsProviderTokens, load_apns_key, load_service_account
from .webpush import VapidKey, WebPushSender, WebPushSubscription

__all__ = ["PushSenders", "web_push_payload"]


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
        """The senders of ``settings``, open until the block is left."""
        async with AsyncExitStack() as stack:
            webpush = apns = fcm = None
            if settings.vapid_key_file is not None:
                client = await stack.enter_async_context(httpx.AsyncClient(timeout=30.0))
                key = VapidKey.from_pem(_read(settings.vapid_key_file, "VAPID key file"))
                webpush = WebPushSender(client, key, settings.vapid_contact)
            if settings.apns_key_file is not None:
                assert settings.apns_key_id and settings.apns_team_id and settings.apns_topic
                auth_key = load_apns_key(
                    _read(settings.apns_key_file, "APNs key file"),
                    key_id=settings.apns_key_id,
                    team_id=settings.apns_team_id,
                )
                apns = await stack.enter_async_context(
                    ApnsSender(
                        ApnsProviderTokens(auth_key),
                        topic=settings.apns_topic,
                        base_url=settings.apns_host,
                    )
                )
            if settings.fcm_service_account_file is not None:
                account = load_service_account(
                    _read(settings.fcm_service_account_file, "FCM service account file")
                )
                fcm = await stack.enter_async_context(
                    FcmSender(account, api_url=settings.fcm_api_url)
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
