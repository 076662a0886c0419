"""What a push sender raises. The caller decides: a gone device is forgotten, a
rejected push is logged, an unavailable service is tried again later."""

from __future__ import annotations

from ..errors import ChatError

__all__ = [
    "PushError",
    "PushRejectedError",
    "PushSubscriptionGoneError",
    "PushUnavailableError",
]


class PushError(ChatError):
    """Base class of the push senders' errors."""


class PushSubscriptionGoneError(PushError):
    """The push service says the device token or subscription is gone (unregistered,
    expired, never valid): the caller removes it and never pushes to it again."""


class PushRejectedError(PushError):
    """The push service refused the push for another reason (a 4xx answer): asking
    again unchanged will not help. ``status`` is the HTTP status, ``reason`` the
    service's reason or body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"the push service refused the push: HTTP {status}: {reason}")
        self.status = status
        self.reason = reason


class PushUnavailableError(PushError):
    """The push service could not be reached or kept answering 429 or 5xx until the
    retries ran out."""
