"""What a turn's sandbox is told: the ``/env`` and ``/config`` answers (with the turn's
attachments and the chat's workspace snapshot).

An :class:`AgentProfile` is the server's agent: a :class:`ConfigResponse` template and
the env vars the agent needs; per session it fills in the prompt and conversation.
:func:`load_agent_profile` takes ``--agent-config FILE`` (``SANDSTREAM_AGENT_CONFIG``) if
given, else the OpenAI-compatible agent when ``OPENAI_MODEL`` is set, else the offline
``scripted`` demo with the bundled skills (docs/chat.md, "Configuration").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec

from sandstream.core import (
    ATTACHMENTS_DIR,
    MAX_COMPONENT_BYTES,
    AcpAgent,
    Attachment,
    ConfigResponse,
    EnvResponse,
    JSONInputError,
    OpenAIAgent,
    PermissionGrant,
    ScriptedAgent,
    ScriptedStep,
    SnapshotManifest,
    agent_kind,
    decode_json,
    provider_vars,
    sanitize_name,
    split_provider_vars,
)

from .errors import ChatConfigError
from .records import BagFile, DispatchRecord, Environment, PermissionGrantRecord

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "OPENAI_ENV_VARS",
    "AgentProfile",
    "demo_plan",
    "load_agent_profile",
    "sandbox_attachments",
    "with_attachments",
    "with_grants",
    "with_snapshot",
]

OPENAI_ENV_VARS: Final = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL")
DEFAULT_SYSTEM_PROMPT: Final = (
    "You are the sandstream assistant. You work in a sandbox with tools; files you "
    "write under output/ are returned to the user."
)
DEMO_MESSAGE: Final = (
    "You said: {prompt}\n\n"
    "I looked around the sandbox, ran a short job of five one-second ticks, and wrote "
    "your words to output/echo.md, which comes back to you with this answer.\n\n"
    "(This answer comes from sandstream's offline scripted agent. Set OPENAI_MODEL, "
    "OPENAI_BASE_URL and OPENAI_API_KEY to talk to a real model.)"
)
DEMO_REASONING: Final = (
    "The user wants to see a turn go by. I will look at the work dir, check the tools, "
    "run a short job, then write their words to a file and read it back."
)
DEMO_STEP_DELAY_SEC: Final = 1.0
"""The demo's pause before each step, as a model would think between tool calls."""
DEMO_DELTA_DELAY_SEC: Final = 0.08
"""Between the pieces (a word each) of the demo's reasoning and answer."""


def demo_plan(prompt: str) -> ScriptedAgent:
    """The offline demo's plan for one turn, paced like a real agent: about 15 s of five
    real skill calls (one a five-second job) a second apart, then its reasoning and
    answer a word at a time — long enough to leave and come back, watch from a
    second device or press stop by hand."""
    return ScriptedAgent(
        steps=[
            ScriptedStep(tool="list_files", args={"path": "."}, delay_sec=DEMO_STEP_DELAY_SEC),
            ScriptedStep(
                tool="run_shell",
                args={"command": "uname -sr; python3 --version"},
                delay_sec=DEMO_STEP_DELAY_SEC,
            ),
            ScriptedStep(
                tool="run_shell",
                args={"command": "for i in 1 2 3 4 5; do echo tick $i; sleep 1; done"},
                delay_sec=DEMO_STEP_DELAY_SEC,
            ),
            ScriptedStep(
                tool="write_file",
                args={"path": "output/echo.md", "content": f"# You said\n\n{prompt}\n"},
                delay_sec=DEMO_STEP_DELAY_SEC,
            ),
            ScriptedStep(
                tool="read_file", args={"path": "output/echo.md"}, delay_sec=DEMO_STEP_DELAY_SEC
            ),
        ],
        message=DEMO_MESSAGE,
        reasoning=DEMO_REASONING,
        delta_delay_sec=DEMO_DELTA_DELAY_SEC,
    )


@dataclass(frozen=True)
class AgentProfile:
    """The server's agent. ``demo``: replace the template's agent by :func:`demo_plan`."""

    template: ConfigResponse
    env_vars: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    demo: bool = False

    def config_for(self, session: DispatchRecord) -> ConfigResponse:
        """The ``/config`` answer for a session: the template with its prompt and history
        (an acp agent's ``env`` without its provider variables: :meth:`provider_env`)."""
        config = msgspec.structs.replace(
            self.template, prompt=session.prompt, conversation=list(session.conversation)
        )
        agent = config.agent
        if isinstance(agent, AcpAgent):
            kept, _ = split_provider_vars(agent.env)
            config = msgspec.structs.replace(config, agent=msgspec.structs.replace(agent, env=kept))
        if self.demo:
            config = msgspec.structs.replace(config, agent=demo_plan(session.prompt))
        return config

    def env_for(self, environment: Environment | None) -> EnvResponse:
        """The ``/env`` answer: the agent's vars, then the workflow environment's, without
        the provider variables (:meth:`provider_env`)."""
        variables = dict(self.env_vars)
        setup_script = ""
        if environment is not None:
            variables.update(environment.vars)
            setup_script = environment.setup_script
        kept, _ = split_provider_vars(variables)
        return EnvResponse(vars=kept, setup_script=setup_script)

    def provider_env(self, environment: Environment | None) -> dict[str, str]:
        """The provider variables (keys and base URLs,
        :data:`~sandstream.core.PROVIDER_VARS`) of a turn: the agent's vars, then the
        workflow environment's, then an acp agent's own ``env`` (the order its agent
        reads them in). They go to the runner in the dispatch, never to the sandbox."""
        agent = self.template.agent
        return provider_vars(
            self.env_vars,
            environment.vars if environment is not None else {},
            agent.env if isinstance(agent, AcpAgent) else {},
        )


def sandbox_attachments(files: Sequence[BagFile]) -> list[Attachment]:
    """The turn's attached files as ``/config`` names them: each at
    ``attachments/<name>`` in the work dir, the name sanitized and made unique in the
    turn (``notes.txt``, ``notes (2).txt``)."""
    taken: set[str] = set()
    attachments = []
    for bag_file in files:
        name = sanitize_name(bag_file.name)
        number = 1
        while name.casefold() in taken:
            number += 1
            name = _numbered(sanitize_name(bag_file.name), number)
        taken.add(name.casefold())
        attachments.append(
            Attachment(
                id=bag_file.id,
                path=f"{ATTACHMENTS_DIR}/{name}",
                size=bag_file.size,
                content_type=bag_file.content_type,
                sha256=bag_file.sha256,
            )
        )
    return attachments


def _numbered(name: str, number: int) -> str:
    """``name`` with `` (number)`` before its extension, its stem cut so that the
    result stays within one path component (255 bytes)."""
    stem, dot, suffix = name.rpartition(".")
    if not stem or len(suffix.encode()) > 64:  # no extension, a leading dot, or no real one
        stem, dot, suffix = name, "", ""
    tail = f" ({number}){dot}{suffix}"
    budget = MAX_COMPONENT_BYTES - len(tail.encode())
    return sanitize_name(stem.encode()[:budget].decode(errors="ignore") + tail)


def with_attachments(config: ConfigResponse, files: Sequence[BagFile]) -> ConfigResponse:
    """``config`` naming the turn's attached ``files`` (:func:`sandbox_attachments`):
    its ``attachments`` are always the turn's, never a template's."""
    return msgspec.structs.replace(config, attachments=sandbox_attachments(files))


def with_grants(config: ConfigResponse, grants: Sequence[PermissionGrantRecord]) -> ConfigResponse:
    """``config`` with the chat's permission ``grants``: always the chat's, never a
    template's."""
    return msgspec.structs.replace(
        config, grants=[PermissionGrant(kind=g.kind, title=g.title) for g in grants]
    )


def with_snapshot(
    config: ConfigResponse, snapshot: SnapshotManifest | None, max_bytes: int
) -> ConfigResponse:
    """``config`` with the workspace ``snapshot`` to restore (the chat's latest) and the
    bound of the one to save (0: none): always the dispatch's, never a template's."""
    return msgspec.structs.replace(config, snapshot=snapshot, snapshot_max_bytes=max_bytes)


def load_agent_profile(
    environ: Mapping[str, str], agent_config: Path | None = None
) -> AgentProfile:
    """The agent profile from a config file or the environment (see the module docstring).

    Raises :class:`ChatConfigError` for an unreadable or invalid config file.
    """
    openai_vars = {name: environ[name] for name in OPENAI_ENV_VARS if environ.get(name)}
    system_prompt = environ.get("SANDSTREAM_SYSTEM_PROMPT", DEFAULT_SYSTEM_PROMPT)
    if agent_config is not None:
        try:
            template = decode_json(agent_config.read_bytes(), ConfigResponse)
        except OSError as exc:
            raise ChatConfigError(f"cannot read the agent config {agent_config}: {exc}") from exc
        except JSONInputError as exc:
            raise ChatConfigError(f"invalid agent config {agent_config}: {exc}") from exc
        kind = agent_kind(template.agent)
        variables = openai_vars if kind == "openai" else {}
        return AgentProfile(template, variables, f"{kind} agent from {agent_config}")
    model = environ.get("OPENAI_MODEL")
    if model:
        template = ConfigResponse(agent=OpenAIAgent(), system_prompt=system_prompt, model=model)
        base = openai_vars.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        return AgentProfile(template, openai_vars, f"openai agent: model {model} at {base}")
    template = ConfigResponse(agent=ScriptedAgent(), system_prompt=system_prompt)
    return AgentProfile(template, {}, "scripted demo agent (offline, bundled skills)", demo=True)
