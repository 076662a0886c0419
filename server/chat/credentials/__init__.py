"""The chat backend's credentials.

- :mod:`.api_token` — the API token every chat and agents route requires;
- :mod:`.stream_tokens` — short-lived tokens for a browser's ``EventSource``;
- :mod:`.one_time` — the sandbox's one-time tokens, minted per dispatch, stored hashed.
"""

from .api_token import ApiToken, read_or_create_secret, resolve_api_token
from .one_time import (
    DEFAULT_LIFETIMES,
    PURPOSES,
    MintedTokens,
    bearer_token,
    hash_token,
    idempotency_key,
    mint_tokens,
)
from .stream_tokens import StreamTokens

__all__: list[str] = [
    "DEFAULT_LIFETIMES",
    "PURPOSES",
    "ApiToken",
    "MintedTokens",
    "StreamTokens",
    "bearer_token",
    "hash_token",
    "idempotency_key",
    "mint_tokens",
    "read_or_create_secret",
    "resolve_api_token",
]
