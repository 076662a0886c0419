"""The push notification routes, under ``/api/assistant/push``: a device's
subscriptions (``POST``/``GET``/``DELETE …/subscriptions``), the server's VAPID public
key (``GET …/vapid-public-key``) and the acks (``POST …/ack``).

Every route needs the chat API token and a workspace, but ``POST …/ack``, which also
takes the ack token an alert carries (a stream token of its chat), so that a service
worker, which has no API token, can ack. A subscription is a Web Push subscription
(``{"webPush": PushSubscription.toJSON()}``), an APNs device token (``apnsToken``) or
an FCM registration token (``fcmToken``), on a service configured here (else 422). A
Web Push endpoint is one the server sends to (:mod:`~sandstream.server.chat.push.endpoints`:
else 422 with the rule it breaks as ``reason``); a workspace holds at most
``--push-max-subscriptions`` devices (else 409, ``push-subscription-limit``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Final

import msgspec
from quart import Blueprint, Response, request

from sandstream.server.chat.model import (
    Identifier,
    PushKind,
    PushSubscription,
    StreamTokenError,
    new_id,
    now_ms,
)
from sandstream.server.chat.push import (
    EndpointPolicy,
    PushEndpointRefusedError,
    PushSenders,
    WebPushSubscription,
    WebPushSubscriptionError,
)
from sandstream.server.http import (
    BadRequestError,
    check_bearer,
    invalid,
    json_response,
    problem,
    read_json,
    status_type,
)

from .bodies import check_id, workspace_query
from .guard import get_service, require_api_token

__all__ = [
    "DeviceAddress",
    "SubscribeRequest",
    "push_ack_blueprint",
    "push_blueprint",
    "read_subscription",
]

push_blueprint = Blueprint("assistant_push", __name__, url_prefix="/api/assistant/push")
require_api_token(push_blueprint)
push_ack_blueprint = Blueprint("assistant_push_ack", __name__, url_prefix="/api/assistant/push")
"""``POST /ack``: the API token or the alert's ack token (checked by the route)."""

_APNS_TOKEN: Final = re.compile(r"[0-9A-Fa-f]{16,200}")
_Token = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]


class WebPushKeys(msgspec.Struct):
    p256dh: _Token
    auth: _Token


class WebPushJson(msgspec.Struct, rename="camel"):
    """A browser's ``PushSubscription.toJSON()`` (``expirationTime`` is ignored)."""

    endpoint: Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
    keys: WebPushKeys
    expiration_time: int | float | None = None


class SubscribeRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /subscriptions``: exactly one of ``webPush``, ``apnsToken``, ``fcmToken``."""

    workspace_id: Identifier
    web_push: WebPushJson | None = None
    apns_token: _Token | None = None
    fcm_token: _Token | None = None


class AckRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /ack``: the device saw (or, ``opened``, opened) the alert ``pushId``."""

    workspace_id: Identifier
    chat_id: Identifier
    push_id: Identifier
    subscription_id: Identifier | None = None
    opened: bool = False
    token: str | None = None


def _senders() -> PushSenders:
    senders = get_service().push_senders
    if senders is None:
        raise BadRequestError(
            problem(503, "Push unavailable", "the push senders are not open", type=status_type(503))
        )
    return senders


@dataclass(frozen=True, slots=True)
class DeviceAddress:
    """Where a subscription's pushes go: its ``kind``, ``address`` (a Web Push endpoint,
    an APNs device token, an FCM registration token) and Web Push's keys."""

    kind: PushKind
    address: str
    p256dh: str | None = None
    auth: str | None = None


def read_subscription(body: SubscribeRequest, endpoints: EndpointPolicy | None) -> DeviceAddress:
    """``body``'s one device, its Web Push endpoint checked by ``endpoints`` (``None``:
    not checked, Web Push is off); :class:`BadRequestError` (422) if it gives not exactly
    one, or a malformed one."""
    given = [x for x in (body.web_push, body.apns_token, body.fcm_token) if x is not None]
    if len(given) != 1:
        raise BadRequestError(invalid("give exactly one of webPush, apnsToken, fcmToken"))
    if body.web_push is not None:
        address = body.web_push.endpoint
        p256dh, auth = body.web_push.keys.p256dh, body.web_push.keys.auth
        try:
            if endpoints is not None:
                endpoints.check(address)
            WebPushSubscription(address, p256dh, auth)
        except WebPushSubscriptionError as exc:
            raise BadRequestError(invalid(f"webPush: {exc}")) from None
        except PushEndpointRefusedError as exc:
            raise BadRequestError(
                invalid(f"webPush.endpoint is refused ({exc.reason}): {exc}", reason=exc.reason)
            ) from None
        return DeviceAddress("webpush", address, p256dh, auth)
    if body.apns_token is not None:
        if not _APNS_TOKEN.fullmatch(body.apns_token):
            raise BadRequestError(invalid("apnsToken is a hex device token"))
        return DeviceAddress("apns", body.apns_token)
    assert body.fcm_token is not None
    return DeviceAddress("fcm", body.fcm_token)


def _subscription(body: SubscribeRequest) -> PushSubscription:
    """The stored form of ``body``'s one subscription; 422 if it is not exactly one,
    malformed (:func:`read_subscription`), or of a service not configured here."""
    senders = _senders()
    endpoints = senders.webpush.endpoints if senders.webpush is not None else None
    device = read_subscription(body, endpoints)
    if not senders.accepts(device.kind):
        raise BadRequestError(invalid(f"{device.kind} push is not configured on this server"))
    return PushSubscription(
        id=new_id("dev"),
        workspace_id=body.workspace_id,
        kind=device.kind,
        address=device.address,
        p256dh=device.p256dh,
        auth=device.auth,
        created_at=now_ms(),
    )


@push_blueprint.get("/vapid-public-key")
async def vapid_public_key() -> Response:
    """``{"publicKey": …}``: the ``applicationServerKey`` to subscribe with (404 when
    Web Push is not configured)."""
    senders = _senders()
    if senders.webpush is None:
        return problem(
            404, "Web Push not configured", "the server has no VAPID key", type=status_type(404)
        )
    return json_response({"publicKey": senders.vapid_public_key})


@push_blueprint.post("/subscriptions")
async def subscribe() -> Response:
    """Register a device → 201 with the stored subscription (the same address again
    keeps its id); 409 past the workspace's ``--push-max-subscriptions``."""
    service = get_service()
    body = await read_json(SubscribeRequest, service.settings.max_json_bytes)
    stored = await service.store.add_push_subscription(
        _subscription(body), limit=service.settings.push.max_subscriptions
    )
    return json_response(stored, 201)


@push_blueprint.get("/subscriptions")
async def list_subscriptions() -> Response:
    """``{"subscriptions": [...]}``: the workspace's devices, oldest first."""
    subscriptions = await get_service().store.list_push_subscriptions(workspace_query())
    return json_response({"subscriptions": subscriptions})


@push_blueprint.delete("/subscriptions/<subscription_id>")
async def unsubscribe(subscription_id: str) -> Response:
    """Forget a device → 204 (404 if the workspace has no such subscription)."""
    check_id(subscription_id, "subscriptionId")
    deleted = await get_service().store.delete_push_subscription(workspace_query(), subscription_id)
    if not deleted:
        return problem(
            404, "No such subscription", f"no subscription {subscription_id}", type=status_type(404)
        )
    return Response(b"", status=204)


@push_ack_blueprint.post("/ack")
async def ack() -> Response:
    """A device saw or opened an alert → 204: a waiting alert pushes nobody; an opened
    one that was sent is dismissed on the other devices. 404 for an unknown alert."""
    service = get_service()
    body = await read_json(AckRequest, service.settings.max_json_bytes)
    if not check_bearer(request.headers.get("Authorization"), service.settings.api_token):
        if body.token is None:
            raise StreamTokenError("an ack needs the API token or the alert's ack token")
        service.stream_tokens.check(
            body.token, workspace_id=body.workspace_id, chat_id=body.chat_id, now=now_ms()
        )
    known = await service.store.ack_push(
        body.workspace_id,
        body.push_id,
        subscription_id=body.subscription_id,
        opened=body.opened,
        now=now_ms(),
    )
    if not known:
        return problem(404, "No such alert", f"no alert {body.push_id}", type=status_type(404))
    return Response(b"", status=204)
