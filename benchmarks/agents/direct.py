"""The agents' own streaming modes, driven without ACP: how to start each, and what its
JSON lines mean.

=========  ==============================================================  ================
agent      command (from the installed prefix)                             first text
=========  ==============================================================  ================
claude     ``node …/@anthropic-ai/claude-agent-sdk/cli.js -p PROMPT``       each delta
           ``--output-format stream-json --verbose --include-partial-``
           ``messages --permission-mode bypassPermissions``
codex      ``codex exec --json --skip-git-repo-check``                      the whole
           ``--dangerously-bypass-approvals-and-sandbox PROMPT``            message
           (``@openai/codex``, not part of the installed agent)
opencode   ``opencode run --format json PROMPT``                            the whole
                                                                            message
gemini     ``gemini -p PROMPT --output-format stream-json --yolo``          each delta
pi         ``node pi --mode json -p PROMPT``                                each delta
=========  ==============================================================  ================

The Claude Code CLI is the one claude-agent-acp bundles (its SDK's ``cli.js``); pi runs
on the prefix's own node, as the preset has it. None of them asks permission: they run
as the ACP side does in :mod:`.run` (bypass/yolo modes, OpenCode's bash allowed).
:func:`classify` reads one parsed JSON line: the agent's answer text, the event that
ends the turn, or neither. Nothing here
starts a process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

from sandstream.container.agents.acp.install import prefix_of
from sandstream.core.schemas import AcpPreset

__all__ = ["STREAMS_DELTAS", "Event", "classify", "direct_command"]

Event: TypeAlias = Literal["text", "end"]

STREAMS_DELTAS: Final[Mapping[AcpPreset, bool]] = {
    "claude": True,
    "codex": False,
    "opencode": False,
    "gemini": True,
    "pi": True,
}
"""Whether the direct mode sends text as it comes (else one event with the whole text)."""


def direct_command(
    preset: AcpPreset, prompt: str, agents_dir: Path, codex_prefix: Path | None
) -> list[str] | None:
    """The direct mode's command line, or ``None`` (codex without ``codex_prefix``)."""
    modules = prefix_of(preset, agents_dir) / "node_modules"
    if preset == "claude":
        cli = modules / "@anthropic-ai" / "claude-agent-sdk" / "cli.js"
        return [
            "node", str(cli), "-p", prompt,
            "--output-format", "stream-json", "--verbose", "--include-partial-messages",
            "--permission-mode", "bypassPermissions",
        ]  # fmt: skip
    if preset == "codex":
        if codex_prefix is None:
            return None
        codex = codex_prefix / "node_modules" / ".bin" / "codex"
        return [
            str(codex), "exec", "--json", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", prompt,
        ]  # fmt: skip
    if preset == "opencode":
        return [str(modules / ".bin" / "opencode"), "run", "--format", "json", prompt]
    if preset == "gemini":
        gemini = modules / ".bin" / "gemini"
        return [str(gemini), "-p", prompt, "--output-format", "stream-json", "--yolo"]
    node = modules / ".bin" / "node"
    return [str(node), str(modules / ".bin" / "pi"), "--mode", "json", "-p", prompt]


_END: Final[tuple[Event, str]] = ("end", "")


def _text(value: Any) -> tuple[Event, str] | None:
    """``("text", value)`` for a non-empty string, else ``None``."""
    return ("text", value) if isinstance(value, str) and value else None


def _claude(event: dict[str, Any]) -> tuple[Event, str] | None:
    kind = event.get("type")
    if kind == "result":
        return _END
    delta = (event.get("event") or {}).get("delta") or {}
    if kind == "stream_event" and delta.get("type") == "text_delta":
        return _text(delta.get("text"))
    return None


def _codex(event: dict[str, Any]) -> tuple[Event, str] | None:
    kind = event.get("type")
    if kind == "turn.completed":
        return _END
    item = event.get("item") or {}
    if kind == "item.completed" and item.get("type") == "agent_message":
        return _text(item.get("text"))
    return None


def _opencode(event: dict[str, Any]) -> tuple[Event, str] | None:
    kind = event.get("type")
    part = event.get("part") or {}
    if kind == "step_finish" and part.get("reason") == "stop":
        return _END
    if kind == "text":
        return _text(part.get("text"))
    return None


def _gemini(event: dict[str, Any]) -> tuple[Event, str] | None:
    kind = event.get("type")
    if kind == "result":
        return _END
    if kind == "message" and event.get("role") == "assistant":
        return _text(event.get("content"))
    return None


def _pi(event: dict[str, Any]) -> tuple[Event, str] | None:
    kind = event.get("type")
    if kind == "agent_end":
        return _END
    update = event.get("assistantMessageEvent") or {}
    if kind == "message_update" and update.get("type") == "text_delta":
        return _text(update.get("delta"))
    return None


_CLASSIFIERS: Final[Mapping[AcpPreset, Callable[[dict[str, Any]], tuple[Event, str] | None]]] = {
    "claude": _claude,
    "codex": _codex,
    "opencode": _opencode,
    "gemini": _gemini,
    "pi": _pi,
}
"""Each preset's reading of one of its (object) events, as :func:`classify` returns it."""


def classify(preset: AcpPreset, event: Any) -> tuple[Event, str] | None:
    """What ``event`` (one JSON line of ``preset``'s direct mode) is to the benchmark:
    ``("text", its text)``, ``("end", "")`` or ``None``."""
    if not isinstance(event, dict):
        return None
    return _CLASSIFIERS[preset](event)
