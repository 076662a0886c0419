"""Push notifications to a user's devices: one sender module per push service (Web Push
in :mod:`.webpush`), sharing their exception types (:mod:`.errors`) and the retries
with backoff (:mod:`.retry`)."""

__all__: list[str] = []
