"""Push notifications to the user's devices: one module per push service.

- :mod:`.apns` — Apple's HTTP/2 provider API, under an ES256 provider token;
- :mod:`.fcm` — Firebase Cloud Messaging's HTTP v1 API, under a service account's
  OAuth 2.0 access token;
- :mod:`.tokens` — the JWTs both sign; :mod:`.notification` — what one push says;
- :mod:`.retry` — the retries every sender shares; :mod:`.errors` — what a push raises.
"""

__all__: list[str] = []
