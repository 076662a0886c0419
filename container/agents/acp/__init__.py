"""The ``acp`` agent kind: agent programs driven over the Agent Client Protocol.

:mod:`.run` runs one turn (:func:`~.run.run_acp`); :mod:`.session` is the client side of
the protocol, :mod:`.connection` its JSON-RPC layer, :mod:`.translate` turns the agent's
updates into envelope lines. :mod:`.install` installs the agents' npm packages and finds
their commands; :mod:`.presets` turns a preset and the provider settings into the
agent's command, environment and config files; :mod:`.shield` builds the preload
library that makes every agent process non-dumpable and out of its tools' reach, and
:mod:`.process` starts the agent with its stdio on socket pairs.
"""

__all__: list[str] = []
