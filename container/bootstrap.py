"""Bootstrap: redeem the setup and run tokens for ``/env`` and ``/config``.

``GET {agent_url}/env`` with ``Authorization: Bearer <otp_setup>`` then
``GET {agent_url}/config`` with ``Bearer <otp_run>``. A 401/403 answer raises
:class:`~.errors.UnauthorizedError` (code ``unauthorized``: the token is wrong,
expired or already used); an unreachable workspace (after the callback retries), a
timeout, another non-2xx status or a body that does not match the schema raises
:class:`~.errors.BootstrapError` (``bootstrap_failed``). Each request carries an
``Idempotency-Key``, so a lost answer is fetched again with the same token
(:func:`~.http.send_callback`). Cancellation propagates.

:func:`forget_token` drops a redeemed one-time token from the dispatch.
"""

from __future__ import annotations

from typing import Literal, TypeVar

import httpx
import msgspec

from sandstream.core import ConfigResponse, Dispatch, EnvResponse, JSONInputError, decode_json

from .errors import BootstrapError, UnauthorizedError
from .http import IDEMPOTENCY_HEADER, HttpSettings, body_excerpt, idempotency_key, send_callback

__all__ = ["TokenName", "fetch_config", "fetch_env", "forget_token", "workspace_url"]

T = TypeVar("T")
TokenName = Literal["otp_setup", "otp_run", "otp_upload"]


def workspace_url(agent_url: str, route: str) -> str:
    """``agent_url`` joined with a route, keeping any path prefix of ``agent_url``."""
    return agent_url.rstrip("/") + "/" + route.lstrip("/")


async def fetch_env(
    client: httpx.AsyncClient, settings: HttpSettings, dispatch: Dispatch
) -> EnvResponse:
    """Redeem ``otp_setup`` for the environment."""
    return await _fetch(
        client, settings, dispatch.agent_url, "env", dispatch.otp_setup, EnvResponse
    )


async def fetch_config(
    client: httpx.AsyncClient, settings: HttpSettings, dispatch: Dispatch
) -> ConfigResponse:
    """Redeem ``otp_run`` for the agent config."""
    return await _fetch(
        client, settings, dispatch.agent_url, "config", dispatch.otp_run, ConfigResponse
    )


def forget_token(dispatch: Dispatch, name: TokenName) -> None:
    """Blank the one-time token ``name`` of ``dispatch`` (in place: every holder of the
    dispatch sees it gone), once it is redeemed and will not be sent again.

    The token's string is then freed, but Python cannot wipe it: its bytes stay in
    freed memory until reused, and copies made on the way (the stdin buffer the
    dispatch was read through, request headers, the TLS or socket buffers) are out of
    reach. What keeps the token from the container's tools is that they cannot read
    its memory at all (:func:`~.procs.hide_from_children`).
    """
    msgspec.structs.force_setattr(dispatch, name, None if name == "otp_upload" else "")


async def _fetch(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    agent_url: str,
    route: str,
    token: str,
    schema: type[T],
) -> T:
    url = workspace_url(agent_url, route)
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json",
        IDEMPOTENCY_HEADER: idempotency_key(),
    }
    try:
        response = await send_callback(
            client, settings, lambda: client.build_request("GET", url, headers=headers)
        )
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise BootstrapError(f"workspace unreachable at {url}: {exc}") from exc
    except httpx.TimeoutException as exc:
        raise BootstrapError(f"workspace timed out on GET /{route}") from exc
    except httpx.HTTPError as exc:
        raise BootstrapError(f"GET /{route} failed: {exc!r}") from exc
    if response.status_code in (401, 403):
        raise UnauthorizedError(
            f"workspace refused the {route} token ({response.status_code}): "
            "wrong, expired or already used"
        )
    if not response.is_success:
        raise BootstrapError(
            f"GET /{route} answered {response.status_code}: {body_excerpt(response)}"
        )
    try:
        return decode_json(response.content, schema)
    except JSONInputError as exc:
        raise BootstrapError(f"invalid /{route} response: {exc}") from exc
