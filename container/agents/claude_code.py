"""The ``claude-code`` agent: a Claude Code-style CLI as a subprocess, translated.

Runs the CLI in ``stream-json`` mode in the work dir, in its own process group, with the
prompt on stdin (docs/protocol.md, ``{"kind": "claude-code"}``), with the agents' shield
preloaded when the agents dir holds it (:mod:`.acp.shield`: what the CLI runs cannot
signal, trace or read it); its stdout goes through
the core's :class:`~sandstream.core.translators.claude_code.ClaudeCodeTranslator`. The
translated ``error`` raises :class:`~..errors.AgentError` with its code; a CLI that cannot
start or exits without a result raises it with ``agent_failed`` and its stderr tail.
Cancellation terminates the CLI's process group and propagates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from sandstream.core import (
    Attachment,
    ChatTurn,
    ClaudeCodeAgent,
    ClaudeCodeTranslator,
    ConfigResponse,
    Envelope,
    Error,
    Result,
    default_agents_dir,
)

from ..attachments import attachments_note
from ..context import RunContext
from ..errors import AgentError
from ..output import now_ms
from ..procs import run_in_group
from .acp.shield import shielded

__all__ = ["build_argv", "render_prompt", "run_claude_code"]

_STDERR_TAIL: Final = 2000


def render_prompt(
    prompt: str, conversation: Sequence[ChatTurn], attachments: Sequence[Attachment] = ()
) -> str:
    """The CLI's stdin: earlier turns (if any) as a transcript, then the prompt, then
    the attached files' paths (if any)."""
    attached = attachments_note(attachments)
    if attached:
        prompt = f"{prompt}\n\n{attached}"
    if not conversation:
        return prompt
    lines = ["Earlier in this conversation:", ""]
    for turn in conversation:
        lines.append(f"[{turn.role}]")
        lines.append(turn.content)
        lines.append("")
    lines += ["[user]", prompt]
    return "\n".join(lines)


def build_argv(
    spec: ClaudeCodeAgent, config: ConfigResponse, mcp_config_path: str | None
) -> list[str]:
    """The CLI's command line."""
    argv = [*spec.command, "-p", "--output-format", "stream-json", "--verbose"]
    if config.model:
        argv += ["--model", config.model]
    if config.system_prompt:
        argv += ["--system-prompt", config.system_prompt]
    if mcp_config_path is not None:
        argv += ["--mcp-config", mcp_config_path]
    return argv + list(spec.extra_args)


def _mcp_config(config: ConfigResponse) -> bytes:
    servers: dict[str, dict[str, object]] = {}
    for server in config.mcp_servers:
        if server.command:
            servers[server.name] = {
                "command": server.command[0],
                "args": server.command[1:],
                "env": server.env,
            }
        elif server.url:
            servers[server.name] = {"type": "http", "url": server.url}
    return msgspec.json.encode({"mcpServers": servers})


class _Relay:
    """Feed CLI output to the translator; emit non-terminals, keep the first terminal."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        self._translator = ClaudeCodeTranslator()
        self.terminal: Result | Error | None = None
        self._stderr = bytearray()

    def stdout(self, chunk: bytes) -> None:
        self._relay(self._translator.feed(chunk, now_ms()))

    def stderr(self, chunk: bytes) -> None:
        self._stderr += chunk
        if len(self._stderr) > 2 * _STDERR_TAIL:
            del self._stderr[:-_STDERR_TAIL]

    def close(self) -> None:
        self._relay(self._translator.close(now_ms()))

    def stderr_tail(self) -> str:
        return bytes(self._stderr[-_STDERR_TAIL:]).decode("utf-8", "replace").strip()

    def _relay(self, envelopes: Sequence[Envelope]) -> None:
        for envelope in envelopes:
            if self.terminal is not None:
                continue
            if isinstance(envelope, Result | Error):
                self.terminal = envelope
            else:
                self._ctx.emitter.emit(envelope)


async def run_claude_code(ctx: RunContext) -> str:
    """Run the CLI to completion; return its final message."""
    spec = ctx.config.agent
    assert isinstance(spec, ClaudeCodeAgent)
    mcp_path: str | None = None
    if ctx.config.mcp_servers:
        path = ctx.state_dir / "mcp.json"
        path.write_bytes(_mcp_config(ctx.config))
        mcp_path = str(path)
    argv = build_argv(spec, ctx.config, mcp_path)
    if ctx.toolbox.registry.names():
        ctx.emitter.log(
            "debug", "claude-code agent: skills are not offered to the CLI (it has its own tools)"
        )
    ctx.emitter.log("info", f"claude-code agent: running {spec.command[0]}")
    relay = _Relay(ctx)
    try:
        outcome = await run_in_group(
            argv,
            cwd=ctx.work_dir,
            env=shielded(ctx.env, default_agents_dir(ctx.env)),
            stdin=render_prompt(ctx.prompt, ctx.conversation, ctx.config.attachments).encode(
                "utf-8"
            ),
            on_stdout=relay.stdout,
            on_stderr=relay.stderr,
            grace=ctx.kill_grace,
        )
    except OSError as exc:
        raise AgentError(f"cannot start {spec.command[0]}: {exc}") from exc
    relay.close()
    terminal = relay.terminal
    if isinstance(terminal, Result):
        return terminal.message
    if isinstance(terminal, Error):
        raise AgentError(terminal.message, code=terminal.code)
    tail = relay.stderr_tail()
    detail = f": {tail}" if tail else ""
    raise AgentError(f"{spec.command[0]} {outcome.describe()} without a result{detail}")
