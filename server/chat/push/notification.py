"""What one push says, whichever service carries it, and the collapse ids derived from
its collapse key.

A :class:`Notification` is either an alert (a title and/or a body the device shows) or
silent (nothing shown: a background push the app acts on, e.g. to dismiss an alert
another device answered). Its ``collapse_key`` makes a newer push of the same key
replace an older one, stored or shown; each service limits the id it takes, so
:func:`apns_collapse_id` turns a longer key into a stable hash, and
:func:`web_push_topic` hashes every key. Bad input (a silent push with a title, an
empty alert, a reserved data key) raises :class:`ValueError` when the notification is made.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Notification", "apns_collapse_id", "web_push_topic"]

_APNS_COLLAPSE_ID_BYTES = 64
_WEB_PUSH_TOPIC_LENGTH = 32
_RESERVED_DATA_KEYS = frozenset({"aps", "from", "notification", "message_type"})


@dataclass(frozen=True, kw_only=True)
class Notification:
    """One push to one device.

    ``data``: string keys and values the app receives with it (beside ``aps`` in an
    APNs payload, in an FCM message's ``data``); ``thread_id`` groups alerts on Apple
    devices; ``ttl``: seconds the service keeps the push for a device that is offline
    (0: now or never).
    """

    title: str = ""
    body: str = ""
    silent: bool = False
    collapse_key: str | None = None
    thread_id: str | None = None
    data: Mapping[str, str] = field(default_factory=dict)
    ttl: int = 24 * 3600

    def __post_init__(self) -> None:
        if self.silent and (self.title or self.body):
            raise ValueError("a silent push shows nothing: no title or body")
        if not self.silent and not (self.title or self.body):
            raise ValueError("an alert needs a title or a body")
        if self.ttl < 0:
            raise ValueError("ttl must be 0 or more seconds")
        if self.collapse_key == "":
            raise ValueError("a collapse key must not be empty (None: no collapsing)")
        for key, value in self.data.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"data must map strings to strings, not {key!r}: {value!r}")
            if key in _RESERVED_DATA_KEYS or key.startswith(("google", "gcm")):
                raise ValueError(f"data key {key!r} is reserved by APNs or FCM")


def apns_collapse_id(key: str) -> str:
    """``key`` as an ``apns-collapse-id`` (at most 64 bytes): itself if it fits, else
    its SHA-256 in hex (64 characters), the same for the same key."""
    raw = key.encode()
    if len(raw) <= _APNS_COLLAPSE_ID_BYTES:
        return key
    return hashlib.sha256(raw).hexdigest()


def web_push_topic(key: str) -> str:
    """``key`` as a Web Push ``Topic`` (RFC 8030: at most 32 characters of the URL-safe
    base64 alphabet): 32 characters of its SHA-256, so that any key gives a valid one,
    the same every time, and the push service learns nothing of the key itself."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")[:_WEB_PUSH_TOPIC_LENGTH]
