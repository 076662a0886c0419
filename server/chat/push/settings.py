"""The push notifications' settings: :class:`PushSettings`, part of
:class:`~..config.ChatSettings`, validated on construction (a bad value raises
:class:`~..errors.ChatConfigError`). Which push services are on follows from the
credentials given: a VAPID key turns Web Push on, an APNs ``.p8`` key APNs, a service
account FCM. The files are read when the senders open (:mod:`.senders`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..errors import ChatConfigError
from .apns import APNS_PRODUCTION
from .fcm import FCM_API
from .retry import RetryPolicy

__all__ = ["LATER", "PushSettings"]

LATER: Final = RetryPolicy(attempts=8, first_delay=30.0, max_delay=600.0, total=3600.0)
"""The default later attempts of a push: 8 rounds over at most an hour from its event."""


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
    ``poll_interval``: how often due pushes are looked for."""

    delay: float = 4.0
    vapid_key_file: Path | None = None
    vapid_contact: str = "mailto:postmaster@localhost"
    apns_key_file: Path | None = None
    apns_key_id: str | None = None
    apns_team_id: str | None = None
    apns_topic: str | None = None
    apns_host: str = APNS_PRODUCTION
    fcm_service_account_file: Path | None = None
    fcm_api_url: str = FCM_API
    claim_lease: float = 30.0
    later: RetryPolicy = LATER
    poll_interval: float = 0.25

    def __post_init__(self) -> None:
        for name in ("delay", "claim_lease", "poll_interval"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ChatConfigError(f"push {name} must be a finite number >= 0, not {value}")
        if self.claim_lease <= 0 or self.poll_interval <= 0:
            raise ChatConfigError("the push claim lease and poll interval must be > 0")
        if not self.vapid_contact.startswith(("mailto:", "https:")):
            raise ChatConfigError("the VAPID contact is a mailto: or https: URI")
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
