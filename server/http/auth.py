"""Bearer-token authentication for the runner: ``Authorization: Bearer <token>``.

The token is compared in constant time (:func:`hmac.compare_digest` on bytes), so the
time a refusal takes says nothing about how much of the token matched.
"""

from __future__ import annotations

import hmac
import os
from typing import Final

from .errors import MissingTokenError

__all__ = ["RUNNER_REALM", "TOKEN_ENV", "check_bearer", "resolve_token"]

TOKEN_ENV: Final = "SANDSTREAM_RUNNER_TOKEN"
RUNNER_REALM: Final = "sandstream-runner"
"""The ``WWW-Authenticate`` realm of every route the runner token opens."""


def resolve_token(flag: str | None, *, insecure_no_token: bool = False) -> str | None:
    """The runner token: the flag, else ``$SANDSTREAM_RUNNER_TOKEN``.

    Returns ``None`` only when there is none and ``insecure_no_token`` is set; raises
    :class:`MissingTokenError` when there is none otherwise (the runner must not
    start open by accident), and :class:`ValueError` for a blank token.
    """
    token = flag if flag is not None else os.environ.get(TOKEN_ENV)
    if token is not None and not token.strip():
        raise ValueError("the runner token is blank")
    if token is None and not insecure_no_token:
        raise MissingTokenError(
            f"no runner token: set {TOKEN_ENV} or pass --token "
            "(or --insecure-no-token to run without authentication)"
        )
    return token


def check_bearer(authorization: str | None, token: str | None) -> bool:
    """True if the ``Authorization`` header carries ``token`` (always true for ``None``).

    The scheme is matched case-insensitively (RFC 9110); the token exactly, in
    constant time. A missing or malformed header is simply ``False``.
    """
    if token is None:
        return True
    if not authorization:
        return False
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(credentials.strip().encode(), token.encode())
