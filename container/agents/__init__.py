"""The agents a config can choose (``agent.kind``): ``openai``, ``claude-code``, ``scripted``.

Each agent is ``async def run(ctx: RunContext) -> str``: it emits ``log`` and ``step``
lines through ``ctx.emitter`` and returns the final message, or raises a
:class:`~..errors.ContainerError`. It never writes the terminal line itself.
"""

from .kinds import Agent, agent_for

__all__ = ["Agent", "agent_for"]
