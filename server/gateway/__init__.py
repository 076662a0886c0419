"""The model gateway: provider keys stay on the runner, sandboxes get a turn credential.

- :class:`TurnGateway` (:mod:`.turn_gateway`): one turn's loopback listener, credential
  and keys; :func:`with_access` rewrites the dispatch the sandbox reads;
- :mod:`.proxy`: one call streamed upstream and back, byte for byte;
- :mod:`.upstream`: the lean HTTP/1.1 client of the calls upstream (connections kept
  per turn, TLS for ``https``); :mod:`.framing`: how much of its bytes is the body;
- :mod:`.apis`: the provider APIs forwarded, keys swapped, each provider's 401;
- :mod:`.observers`: :class:`CallObserver`, what sees each answer pass (a usage meter
  plugs in as one more :data:`ObserverFactory`);
- :mod:`.metering`: :class:`CallMeter`, the observer that reads a model call's tokens;
- :mod:`.health`: failed calls noted at once, the turn given up when none succeed;
- :mod:`.http1`: the HTTP/1.1 server side on h11.

The runner (:mod:`sandstream.server.runner`) uses it; it uses no role.
"""

from .errors import GatewayError, GatewayListenError
from .health import CallFailure, ProviderHealth
from .metering import CallMeter, CallOutcome, MeteredCall
from .observers import CallObserver, ObserverFactory, ProxiedCall
from .turn_gateway import CREDENTIAL_PREFIX, TurnGateway, gateway_keys, with_access

__all__ = [
    "CREDENTIAL_PREFIX",
    "CallFailure",
    "CallMeter",
    "CallObserver",
    "CallOutcome",
    "GatewayError",
    "GatewayListenError",
    "MeteredCall",
    "ObserverFactory",
    "ProviderHealth",
    "ProxiedCall",
    "TurnGateway",
    "gateway_keys",
    "with_access",
]
