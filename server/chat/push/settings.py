"""The push notifications' settings: :class:`PushSettings`, part of
:class:`~..config.ChatSettings`, validated on construction (a bad value raises
:class:`~sandstream.server.chat.model.ChatConfigError`). Which push services are on follows from the
credentials given: a VAPID key turns Web Push on, an APNs ``.p8`` key APNs, a service
account FCM. The files are read when the senders open (:mod:`.senders`). Each flag of
``sandstream serve``'s push group is declared on its field
(:mod:`sandstream.server.settings_table`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sandstream.server.chat.model import ChatConfigError
from sandstream.server.settings_table import Setting, at_least, check_fields

from .apns import APNS_PRODUCTION
from .endpoints import AllowedHost
from .fcm import FCM_API
from .retry import RetryPolicy

__all__ = ["LATER", "PushSettings"]

LATER: Final = RetryPolicy(attempts=8, first_delay=30.0, max_delay=600.0, total=3600.0)
"""The default later attempts of a push: 8 rounds over at most an hour from its event."""


def _non_negative(name: str, value: float) -> str | None:
    if math.isfinite(value) and value >= 0:
        return None
    return f"push {name} must be a finite number >= 0, not {value}"


def _lease(name: str, value: float) -> str | None:
    if value > 0 or not (math.isfinite(value) and value >= 0):
        return _non_negative(name, value)
    return "the push claim lease and poll interval must be > 0"


def _contact(name: str, value: str) -> str | None:
    if value.startswith(("mailto:", "https:")):
        return None
    return "the VAPID contact is a mailto: or https: URI"


def _allow_hosts(name: str, value: frozenset[str]) -> str | None:
    for entry in value:
        try:
            AllowedHost.parse(entry)
        except ValueError as error:
            return f"--push-allow-host: {error}"
    return None


def _entries(values: list[str]) -> frozenset[str]:
    return frozenset(value.strip() for value in values if value.strip())


def _path(value: Any) -> Path | None:
    return None if not value else Path(value).expanduser()


@dataclass(frozen=True, kw_only=True)
class PushSettings:
    """``delay``: seconds an alert waits for a device to see its event before it is
    pushed. ``vapid_key_file`` (a P-256 private key, PEM) and ``vapid_contact`` (the
    ``mailto:`` or ``https:`` URI push services may contact): Web Push. ``apns_*``:
    the ``.p8`` auth key, its key id, the team id, the app's bundle id (``topic``) and
    the host (production or development). ``fcm_service_account_file``: a Google
    service account's JSON key; ``fcm_api_url`` the FCM API. ``claim_lease``: seconds a
    replica holds a due push, renewed at each device it sends to (a replica that dies
    holding it loses it this long after); one send's retries fit in a third of it
    (:attr:`send_retries`). ``later``: the push's later attempts when a push service
    could not take it (``attempts`` rounds, the first after ``first_delay`` s, doubling
    to ``max_delay``, never past ``total`` s after its event; then it is given up).
    ``poll_interval``: how often due pushes are looked for. ``allow_hosts``: the
    ``host[:port]`` of private push services a Web Push endpoint may name (see
    :mod:`.endpoints`). ``max_subscriptions``: the devices a workspace may register.
    ``workspace_sends``: sends to one workspace's devices under way at once;
    ``max_in_flight``: pushes a replica sends at once."""

    delay: float = Setting(
        flag="--push-delay",
        default=4.0,
        parse=float,
        env="SANDSTREAM_PUSH_DELAY",
        help="seconds a notification waits for a device to see its event before it is pushed",
        check=_non_negative,
    ).field()
    vapid_key_file: Path | None = Setting(  # noqa: RUF009
        flag="--vapid-key-file",
        env="SANDSTREAM_VAPID_KEY_FILE",
        help="the Web Push VAPID private key, PEM on P-256; turns Web Push on",
        convert=_path,
    ).field()
    vapid_contact: str = Setting(
        flag="--vapid-contact",
        default="mailto:postmaster@localhost",
        env="SANDSTREAM_VAPID_CONTACT",
        keep_blank=True,
        help="the mailto: or https: contact push services see in the VAPID token",
        check=_contact,
    ).field()
    apns_key_file: Path | None = Setting(  # noqa: RUF009
        flag="--apns-key-file",
        env="SANDSTREAM_APNS_KEY_FILE",
        help="the APNs auth key (.p8); turns APNs on",
        convert=_path,
    ).field()
    apns_key_id: str | None = Setting(
        flag="--apns-key-id", env="SANDSTREAM_APNS_KEY_ID", help="the .p8 key's id"
    ).field()
    apns_team_id: str | None = Setting(
        flag="--apns-team-id", env="SANDSTREAM_APNS_TEAM_ID", help="the Apple developer team id"
    ).field()
    apns_topic: str | None = Setting(
        flag="--apns-topic", env="SANDSTREAM_APNS_TOPIC", help="the app's bundle id"
    ).field()
    apns_host: str = Setting(
        flag="--apns-host",
        default=APNS_PRODUCTION,
        env="SANDSTREAM_APNS_HOST",
        keep_blank=True,
        help="the APNs host: production, or https://api.sandbox.push.apple.com for "
        "development builds",
    ).field()
    fcm_service_account_file: Path | None = Setting(  # noqa: RUF009
        flag="--fcm-service-account-file",
        env="SANDSTREAM_FCM_SERVICE_ACCOUNT_FILE",
        help="a Google service account's JSON key with FCM access; turns FCM on",
        convert=_path,
    ).field()
    fcm_api_url: str = Setting(
        flag="--fcm-api-url",
        default=FCM_API,
        env="SANDSTREAM_FCM_API_URL",
        keep_blank=True,
        help="the FCM API",
    ).field()
    claim_lease: float = Setting(
        flag="--push-claim-lease",
        default=30.0,
        parse=float,
        env="SANDSTREAM_PUSH_CLAIM_LEASE",
        help="seconds a replica holds a due notification while it sends it, renewed at "
        "each device: another replica takes over a dead one's after it",
        check=_lease,
    ).field()
    allow_hosts: frozenset[str] = Setting(
        flag="--push-allow-host",
        kind="repeated",
        env="SANDSTREAM_PUSH_ALLOW_HOSTS",
        metavar="HOST[:PORT]",
        help="a private Web Push service endpoints may name (any address, http allowed); "
        "without a port, any port of the host",
        convert=_entries,
        check=_allow_hosts,
    ).field(default=frozenset())
    max_subscriptions: int = Setting(
        flag="--push-max-subscriptions",
        default=50,
        parse=int,
        env="SANDSTREAM_PUSH_MAX_SUBSCRIPTIONS",
        help="push devices one workspace may register",
        check=at_least(1),
    ).field()
    workspace_sends: int = Setting(
        flag="--push-workspace-sends",
        default=4,
        parse=int,
        env="SANDSTREAM_PUSH_WORKSPACE_SENDS",
        help="pushes to one workspace's devices sent at once",
        check=at_least(1),
    ).field()
    max_in_flight: int = Setting(default=32, check=at_least(1)).field()
    later: RetryPolicy = LATER
    poll_interval: float = Setting(default=0.25, check=_lease).field()

    def __post_init__(self) -> None:
        check_fields(self, ChatConfigError)
        apns = (self.apns_key_id, self.apns_team_id, self.apns_topic)
        if self.apns_key_file is not None and not all(apns):
            raise ChatConfigError("APNs needs its key id, team id and topic with its .p8 key")

    @property
    def send_retries(self) -> RetryPolicy:
        """The retries within one request to a push service: within a third of the
        claim lease, so that a send (FCM's may fetch an access token first) ends while
        its claim holds; beyond it, :attr:`later` tries again."""
        total = self.claim_lease / 3
        return RetryPolicy(
            attempts=5, first_delay=min(1.0, total / 8), max_delay=total / 4, total=total
        )

    @property
    def enabled(self) -> bool:
        """Whether any push service is configured."""
        return any(
            path is not None
            for path in (self.vapid_key_file, self.apns_key_file, self.fcm_service_account_file)
        )
