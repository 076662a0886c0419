"""The ``acp`` agent kind: agent programs driven over the Agent Client Protocol.

:mod:`.install` installs the agents' npm packages and finds their commands;
:mod:`.presets` turns a preset and the provider settings into the agent's command,
environment and config files.
"""

__all__: list[str] = []
