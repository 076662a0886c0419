"""Which agent function runs a config's ``agent`` spec (:func:`agent_for`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sandstream.core import AcpAgent, AgentSpec, ClaudeCodeAgent, OpenAIAgent, ScriptedAgent

from ..context import RunContext

__all__ = ["Agent", "agent_for"]

Agent = Callable[[RunContext], Awaitable[str]]


def agent_for(spec: AgentSpec) -> Agent:
    """The agent function for a config's ``agent`` spec."""
    if isinstance(spec, OpenAIAgent):
        from .openai import run_openai

        return run_openai
    if isinstance(spec, ClaudeCodeAgent):
        from .claude_code import run_claude_code

        return run_claude_code
    if isinstance(spec, AcpAgent):
        from .acp.run import run_acp

        return run_acp
    if isinstance(spec, ScriptedAgent):
        from .scripted import run_scripted

        return run_scripted
    raise TypeError(f"unknown agent spec {spec!r}")  # pragma: no cover
