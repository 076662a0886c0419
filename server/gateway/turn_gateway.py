"""A turn's model gateway: a loopback listener of its own, a credential of its own, the
provider keys it puts in the credential's place, and the health of its calls.

:meth:`TurnGateway.serve` (a trio task of the turn) opens the listener on
``127.0.0.1`` (a port of its own, which the turn's sandbox is forwarded alone), reports
the :class:`~sandstream.core.GatewayAccess` the sandbox is given, and serves until
cancelled (the turn ends: every call in flight is cut). A request whose key is not this
turn's credential (missing, another turn's, altered, or this one's after
:meth:`TurnGateway.revoke`) gets the provider's own 401 and never reaches the provider.
A listener that cannot open raises :class:`~.errors.GatewayListenError`.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import msgspec
import trio

from sandstream.core import PROVIDERS, Dispatch, GatewayAccess, protocol_of, provider_error

from .apis import Route, allowed, error_body, presented_key, route
from .errors import GatewayListenError
from .health import CallFailure, ProviderHealth
from .http1 import Exchange, serve_connection
from .observers import ObserverFactory, ProxiedCall
from .proxy import forward
from .upstream import UpstreamPool

__all__ = ["CREDENTIAL_PREFIX", "TurnGateway", "gateway_keys", "with_access"]

log = logging.getLogger("sandstream.gateway")

CREDENTIAL_PREFIX: Final = "sk-sandstream-"
"""How a turn credential begins (a key-shaped string the agents accept)."""
LOOPBACK: Final = "127.0.0.1"
_JSON: Final = b"application/json"


def gateway_keys(*sources: Mapping[str, str]) -> dict[str, str]:
    """Per provider, the variables of the first of ``sources`` that gives its key (the
    dispatch's, then the runner's own): what a turn's gateway calls it with."""
    chosen: dict[str, str] = {}
    for provider in PROVIDERS:
        for source in sources:
            if provider.key(source) is not None:
                chosen.update((n, source[n]) for n in provider.variables if source.get(n))
                break
    return chosen


def with_access(dispatch: bytes, access: GatewayAccess) -> bytes:
    """The dispatch JSON as the sandbox gets it: no provider variables, ``access`` instead."""
    decoded = msgspec.json.decode(dispatch, type=Dispatch)
    return msgspec.json.encode(msgspec.structs.replace(decoded, providers={}, gateway=access))


class TurnGateway:
    """The gateway of turn ``turn_id``, calling the providers with ``keys`` (provider
    variables, :func:`gateway_keys`). ``on_failure``/``on_unavailable``: see
    :class:`~.health.ProviderHealth` (``unavailable_after`` seconds). ``observers``:
    factories of more observers of each call (a usage meter), told before the health's.
    ``admit``: asked before each model call is forwarded; a message refuses it (429).
    """

    def __init__(
        self,
        turn_id: str,
        keys: Mapping[str, str],
        *,
        unavailable_after: float,
        on_failure: Callable[[CallFailure], object],
        on_unavailable: Callable[[CallFailure], object],
        observers: Sequence[ObserverFactory] = (),
        admit: Callable[[ProxiedCall], str | None] | None = None,
    ) -> None:
        self.turn_id = turn_id
        self._admit = admit
        self._keys = dict(keys)
        self.providers = [p for p in PROVIDERS if p.key(self._keys) is not None]
        """The providers it has keys for (the others get 401)."""
        self.credential = CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
        self.health = ProviderHealth(
            unavailable_after, on_failure=on_failure, on_unavailable=on_unavailable
        )
        self._observers = [*observers, self.health.observer]
        self._revoked = False
        self.access: GatewayAccess | None = None
        """How the sandbox reaches it, once serving."""

    def revoke(self) -> None:
        """Refuse the credential from now on (the turn's sandbox is gone)."""
        self._revoked = True

    async def serve(self, task_status: trio.TaskStatus[GatewayAccess]) -> None:
        """Listen, report the access, serve until cancelled. Raises
        :class:`GatewayListenError` before ``started`` if no listener can open."""
        try:
            listeners = await trio.open_tcp_listeners(0, host=LOOPBACK)
        except OSError as exc:
            raise GatewayListenError(exc.errno, f"cannot open the model gateway: {exc}") from exc
        port = listeners[0].socket.getsockname()[1]
        self.access = GatewayAccess(
            url=f"http://{LOOPBACK}:{port}",
            credential=self.credential,
            providers=[p.name for p in self.providers],
        )
        pool = UpstreamPool()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.health.watch)

                async def handle(stream: trio.SocketStream) -> None:
                    await serve_connection(stream, lambda exchange: self._handle(pool, exchange))

                await nursery.start(trio.serve_listeners, handle, listeners)
                task_status.started(self.access)
        finally:
            with trio.CancelScope(shield=True):
                await pool.aclose()

    async def _handle(self, pool: UpstreamPool, exchange: Exchange) -> None:
        found = route(exchange.target)
        if found is None:
            body = b'{"error": {"message": "no such provider on the model gateway"}}'
            await _refuse(exchange, 404, body)
            return
        provider = found.provider
        if not self._authorized(found, exchange):
            message = (
                "the model gateway does not know this key: give the credential of this "
                "turn, while it runs"
            )
            log.info("turn %s: refused a call without this turn's credential", self.turn_id)
            await _refuse(exchange, 401, error_body(provider, 401, message))
            return
        key = provider.key(self._keys)
        if not allowed(exchange.method, found) or key is None:
            path = exchange.target.decode("latin-1")
            why = "has no key for" if key is None else "does not forward"
            message = f"the model gateway {why} {exchange.method.decode('latin-1')} {path}"
            log.info("turn %s: %s", self.turn_id, message)
            await _refuse(exchange, 404, error_body(provider, 404, message))
            return
        call = ProxiedCall(
            self.turn_id, provider.name, exchange.method.decode("latin-1"), found.rest
        )
        protocol = protocol_of(call.method, "/" + call.path)
        refusal = None if protocol is None or self._admit is None else self._admit(call)
        if refusal is not None:
            assert protocol is not None
            log.info("turn %s: refused a model call: %s", self.turn_id, refusal)
            await _refuse(exchange, 429, provider_error(protocol, 429, refusal, quota=True))
            return
        await forward(
            pool, exchange, found, key, provider.base_url(self._keys), call, self._observers
        )

    def _authorized(self, found: Route, exchange: Exchange) -> bool:
        if self._revoked:
            return False
        given = presented_key(found.provider, exchange.headers, found.query)
        return given is not None and hmac.compare_digest(
            given.encode("latin-1"), self.credential.encode()
        )


async def _refuse(exchange: Exchange, status: int, body: bytes) -> None:
    """Answer without calling the provider, once the request's body is read (a
    connection closed with unread bytes would reset before the client reads this)."""
    if exchange.has_body:
        async for _ in exchange.body():
            pass
    await exchange.answer(status, body, _JSON)
