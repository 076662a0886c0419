"""The push senders' exception types, one root (:class:`PushError`) under
:class:`~sandstream.server.chat.model.errors.ChatError`.

What the caller does with each: :class:`PushSubscriptionGoneError` — remove the
subscription (or device token); :class:`PushRejectedError` — the message or the
server's credentials are wrong, sending it again will fail again;
:class:`PushUnavailableError` — the push service could not take it now, a later try
may succeed; :class:`PushEndpointRefusedError` — the endpoint is not one the server
sends to (nothing was sent); :class:`PushInDoubtError` — the service may have taken it, and another
try could show it twice.
"""

from __future__ import annotations

from sandstream.server.chat.model import ChatError

__all__ = [
    "PushEndpointRefusedError",
    "PushError",
    "PushInDoubtError",
    "PushRejectedError",
    "PushSubscriptionGoneError",
    "PushUnavailableError",
    "VapidUnconfiguredError",
]


class PushError(ChatError):
    """Base class of the push senders' errors."""


class PushSubscriptionGoneError(PushError):
    """The subscription (or device token) is no longer valid — the push service answered
    404 or 410, or named it unregistered or malformed — and the caller removes it.
    ``status`` is the service's HTTP status (``None``: refused before sending),
    ``reason`` its reason or the start of its answer."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        answered = "" if status is None else f"the push service answered {status}: "
        super().__init__(f"{answered}the subscription is gone: {reason}")
        self.status = status
        self.reason = reason


class PushEndpointRefusedError(PushError):
    """A Web Push endpoint the server does not send to: not https, with a user name or
    password, on a host that is not public (or resolves to an address that is not),
    or a push service that answered with a redirect. ``reason`` names the rule
    (``not-a-url``, ``not-https``, ``userinfo``, ``non-canonical-address``,
    ``invalid-host-name``, ``single-label-name``, ``special-use-name``, ``not-public``,
    ``redirect``)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class PushRejectedError(PushError):
    """The push service refused the message with a 4xx other than 404, 410 and 429
    (payload too large, bad authorization, malformed request…): sending it again as it
    is will not help. ``reason`` is the service's reason or the start of its answer."""

    def __init__(self, status: int, reason: str = "") -> None:
        detail = f": {reason}" if reason else ""
        super().__init__(f"the push service refused the message with HTTP {status}{detail}")
        self.status = status
        self.reason = reason


class PushUnavailableError(PushError):
    """The push service could not be reached or answered 429 or 5xx until the retries
    ran out (attempts or time). ``status`` is the last answer's status, ``None`` when
    the last attempt failed in transport; ``attempts`` how many were made;
    ``retry_after`` the seconds the last answer's ``Retry-After`` asked to wait."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        attempts: int = 0,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.retry_after = retry_after


class PushInDoubtError(PushError):
    """The request may have reached the push service (it was sent whole) and its answer
    never came: a read failed or timed out. The service may have taken the push, so
    it is not sent again."""


class VapidUnconfiguredError(PushError):
    """Web Push is not configured here: the server has no VAPID key."""

    def __init__(self) -> None:
        super().__init__("Web Push is not configured: the server has no VAPID key")
