"""The runner's metering of model calls: each call's tokens into its turn's stream and
into the runner's counters.

:class:`UsageMetering` is the :data:`~sandstream.server.gateway.ObserverFactory` every
:class:`~.admission.Runner` registers on its turns' gateways: for each model call (a
request :func:`~sandstream.core.protocol_of` names; others are not its business) it
makes a :class:`~sandstream.server.gateway.CallMeter`, and when that call ends or is cut
hands its ``usage`` line to the turn it belongs to (``TurnStream.add_usage``; a turn
closed meanwhile no longer takes it) and counts its tokens (by provider, model and
kind) and the call (by provider and outcome) for ``/metrics``. Sans-IO and never raises.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Final, Literal, TypeAlias

from sandstream.core import protocol_of
from sandstream.server.gateway import CallMeter, CallObserver, CallOutcome, MeteredCall, ProxiedCall

from .turn import TurnStream

__all__ = ["TokenKind", "UsageMetering"]

TokenKind: TypeAlias = Literal["input", "output", "cached", "cache_write"]
"""The tokens of a call, split as billing splits them (``cached``: input read from the
provider's cache; ``cache_write``: input written to it)."""
UNNAMED_MODEL: Final = ""
"""The model label of calls whose answer named none."""


class UsageMetering:
    """Meters the model calls of the turns ``turn_of`` finds by id (see the module
    docstring). ``tokens`` and ``calls`` are the counters ``/metrics`` reads."""

    def __init__(self, turn_of: Callable[[str], TurnStream | None]) -> None:
        self._turn_of = turn_of
        self.tokens: Counter[tuple[str, str, TokenKind]] = Counter()
        """Tokens metered since start, by (provider, model, kind)."""
        self.calls: Counter[tuple[str, CallOutcome | Literal["over_budget"]]] = Counter()
        """Model calls since start, by (provider, outcome); ``over_budget``: refused by
        the gateway, the turn's token budget spent."""

    def __call__(self, call: ProxiedCall) -> CallObserver | None:
        """The observer of ``call``: a meter for a model call, else ``None``."""
        protocol = protocol_of(call.method, "/" + call.path)
        if protocol is None:
            return None
        return CallMeter(call, protocol, self._metered)

    def refused(self, call: ProxiedCall) -> None:
        """Count a model call the gateway refused, its turn's budget spent."""
        self.calls[call.provider, "over_budget"] += 1

    def _metered(self, metered: MeteredCall) -> None:
        call, line = metered.call, metered.line
        self.calls[call.provider, metered.outcome] += 1
        model = line.model or UNNAMED_MODEL
        counts: tuple[tuple[TokenKind, int], ...] = (
            ("input", line.input_tokens),
            ("output", line.output_tokens),
            ("cached", line.cached_input_tokens),
            ("cache_write", line.cache_write_tokens),
        )
        for kind, count in counts:
            if count:
                self.tokens[call.provider, model, kind] += count
        turn = self._turn_of(call.turn_id)
        if turn is not None:
            turn.add_usage(line)
