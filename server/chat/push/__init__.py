"""Push notifications to the user's devices: one sender module per push service.

- :mod:`.webpush` — Web Push (RFC 8030) with VAPID (RFC 8292) and ``aes128gcm`` payload
  encryption (RFC 8291);
- :mod:`.apns` — Apple's HTTP/2 provider API, under an ES256 provider token;
- :mod:`.fcm` — Firebase Cloud Messaging's HTTP v1 API, under a service account's
  OAuth 2.0 access token;
- :mod:`.tokens` — the JWTs APNs and FCM sign; :mod:`.notification` — what one push
  says, and its collapse key as each service takes it;
- :mod:`.endpoints` — where a Web Push message may go (public https hosts, or the
  operator's allow-list), checked at registration and at each send;
- :mod:`.retry` — the retries every sender shares; :mod:`.client` — the HTTP client a
  sender owns, and the bounded read of an answer; :mod:`.errors` — what a push raises.
"""

from .endpoints import EndpointPolicy
from .errors import PushEndpointRefusedError
from .outbox import PushOutbox
from .senders import PushSenders, load_credentials
from .settings import PushSettings
from .webpush import WebPushSubscription, WebPushSubscriptionError

__all__: list[str] = [
    "EndpointPolicy",
    "PushEndpointRefusedError",
    "PushOutbox",
    "PushSenders",
    "PushSettings",
    "WebPushSubscription",
    "WebPushSubscriptionError",
    "load_credentials",
]
