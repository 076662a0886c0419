"""``sandstream serve``'s push notification flags (each with an environment variable)
and the :class:`~sandstream.server.chat.push.settings.PushSettings` they make. A bad
value raises :class:`~sandstream.server.chat.errors.ChatConfigError` from the settings."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from sandstream.server.chat.push.apns import APNS_PRODUCTION
from sandstream.server.chat.push.fcm import FCM_API
from sandstream.server.chat.push.settings import PushSettings

__all__ = ["add_push_arguments", "push_settings"]


def _path(value: str | None) -> Path | None:
    return None if not value else Path(value).expanduser()


def add_push_arguments(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """Add the ``push notifications`` argument group to ``parser``."""
    push = parser.add_argument_group("push notifications (docs/push.md)")
    push.add_argument(
        "--push-delay",
        type=float,
        default=float(env.get("SANDSTREAM_PUSH_DELAY") or 4),
        help="seconds a notification waits for a device to see its event before it is "
        "pushed ($SANDSTREAM_PUSH_DELAY, 4)",
    )
    push.add_argument(
        "--push-claim-lease",
        type=float,
        default=float(env.get("SANDSTREAM_PUSH_CLAIM_LEASE") or 30),
        help="seconds a replica holds a due notification while it sends it, renewed at "
        "each device: another replica takes over a dead one's after it "
        "($SANDSTREAM_PUSH_CLAIM_LEASE, 30)",
    )
    push.add_argument(
        "--vapid-key-file",
        default=env.get("SANDSTREAM_VAPID_KEY_FILE"),
        help="the Web Push VAPID private key, PEM on P-256; turns Web Push on "
        "($SANDSTREAM_VAPID_KEY_FILE)",
    )
    push.add_argument(
        "--vapid-contact",
        default=env.get("SANDSTREAM_VAPID_CONTACT", "mailto:postmaster@localhost"),
        help="the mailto: or https: contact push services see in the VAPID token "
        "($SANDSTREAM_VAPID_CONTACT, %(default)s)",
    )
    push.add_argument(
        "--apns-key-file",
        default=env.get("SANDSTREAM_APNS_KEY_FILE"),
        help="the APNs auth key (.p8); turns APNs on ($SANDSTREAM_APNS_KEY_FILE)",
    )
    push.add_argument(
        "--apns-key-id",
        default=env.get("SANDSTREAM_APNS_KEY_ID"),
        help="the .p8 key's id ($SANDSTREAM_APNS_KEY_ID)",
    )
    push.add_argument(
        "--apns-team-id",
        default=env.get("SANDSTREAM_APNS_TEAM_ID"),
        help="the Apple developer team id ($SANDSTREAM_APNS_TEAM_ID)",
    )
    push.add_argument(
        "--apns-topic",
        default=env.get("SANDSTREAM_APNS_TOPIC"),
        help="the app's bundle id ($SANDSTREAM_APNS_TOPIC)",
    )
    push.add_argument(
        "--apns-host",
        default=env.get("SANDSTREAM_APNS_HOST", APNS_PRODUCTION),
        help="the APNs host: production, or https://api.sandbox.push.apple.com for "
        "development builds ($SANDSTREAM_APNS_HOST, %(default)s)",
    )
    push.add_argument(
        "--fcm-service-account-file",
        default=env.get("SANDSTREAM_FCM_SERVICE_ACCOUNT_FILE"),
        help="a Google service account's JSON key with FCM access; turns FCM on "
        "($SANDSTREAM_FCM_SERVICE_ACCOUNT_FILE)",
    )
    push.add_argument(
        "--fcm-api-url",
        default=env.get("SANDSTREAM_FCM_API_URL", FCM_API),
        help="the FCM API ($SANDSTREAM_FCM_API_URL, %(default)s)",
    )


def push_settings(args: argparse.Namespace) -> PushSettings:
    """The push settings of parsed ``args``."""
    return PushSettings(
        delay=args.push_delay,
        claim_lease=args.push_claim_lease,
        vapid_key_file=_path(args.vapid_key_file),
        vapid_contact=args.vapid_contact,
        apns_key_file=_path(args.apns_key_file),
        apns_key_id=args.apns_key_id,
        apns_team_id=args.apns_team_id,
        apns_topic=args.apns_topic,
        apns_host=args.apns_host,
        fcm_service_account_file=_path(args.fcm_service_account_file),
        fcm_api_url=args.fcm_api_url,
    )
