"""The chat backend's credentials.

- :mod:`.api_token` — the API token every chat and agents route requires;
- :mod:`.stream_tokens` — short-lived tokens for a browser's ``EventSource``;
- :mod:`.one_time` — the sandbox's one-time tokens, minted per dispatch, stored hashed.
"""

__all__: list[str] = []
