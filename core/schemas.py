"""The wire schemas the server and the container both speak, as msgspec types: the
dispatch, ``/env``, ``/config`` (with the turn's attachments), ``/results``, the
snapshot callbacks' bodies, the skills manifest, the user messages on the
container's stdin and a warm container's binding (:class:`WarmBinding`).

These are the single source of truth for the workspace callback API: the chat backend
serves exactly :class:`EnvResponse` and :class:`ConfigResponse` (encode them with
:func:`msgspec.json.encode`) and answers ``POST /results`` with a :class:`ResultsReceipt`.
All field names are snake_case. Unknown fields are ignored (forward compatibility);
missing required fields or wrong types raise :class:`msgspec.ValidationError` on decode.
See ``docs/container.md`` for the documented schemas and examples.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeAlias

import msgspec

from .snapshots import SnapshotManifest

__all__ = [
    "ATTACHMENTS_DIR",
    "DEFAULT_MAX_RUNTIME_SEC",
    "HEAP_TUNABLES",
    "MAX_SNAPSHOT_HASHES",
    "WARM_READY",
    "AcpAgent",
    "AcpPreset",
    "AgentSpec",
    "Attachment",
    "BlobHashes",
    "ChatTurn",
    "ClaudeCodeAgent",
    "ConfigResponse",
    "Dispatch",
    "EnvResponse",
    "GatewayAccess",
    "InboundMessage",
    "LoadSpec",
    "McpServer",
    "MissingBlobs",
    "OpenAIAgent",
    "PermissionAnswer",
    "PermissionGrant",
    "ResultFile",
    "ResultsReceipt",
    "ScriptedAgent",
    "ScriptedError",
    "ScriptedStep",
    "SkillManifest",
    "SkillSpec",
    "SnapshotReceipt",
    "StoredBlobs",
    "TokenBudget",
    "UserMessage",
    "WarmBinding",
    "agent_kind",
]

ATTACHMENTS_DIR: Final = "attachments"
"""The folder of the work dir that a turn's attachments are written to."""
HEAP_TUNABLES: Final = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
"""The environment a launcher starts the container with to ask for huge pages:
glibc (>= 2.35; older ones ignore it) advises its heap ``MADV_HUGEPAGE``."""
DEFAULT_MAX_RUNTIME_SEC: Final = 8 * 3600.0
"""The runtime cap when ``/config`` sets none: 8 hours."""

_Positive = Annotated[float, msgspec.Meta(gt=0)]
_NonNegative = Annotated[float, msgspec.Meta(ge=0)]
_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
SkillName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
"""Skill names are valid OpenAI function names."""


class ChatTurn(msgspec.Struct, frozen=True):
    """One earlier turn of the conversation."""

    role: Literal["user", "assistant"]
    content: str
    ts: int | None = None


class GatewayAccess(msgspec.Struct, frozen=True):
    """How a sandbox reaches its turn's model gateway: ``url`` (as the sandbox sees it),
    the turn's ``credential`` (in place of every provider key), and the ``providers``
    served (names of :data:`~sandstream.core.providers.PROVIDERS`)."""

    url: Annotated[str, msgspec.Meta(pattern=r"^https?://")]
    credential: _NonEmpty
    providers: list[str] = msgspec.field(default_factory=list)


class TokenBudget(msgspec.Struct, frozen=True):
    """The tokens a turn's model calls may spend, and which budget set that.

    ``tokens``: what the turn may use; ``budget``: the tighter of the budgets that
    apply, ``turn`` (every turn's own) or ``workspace_day`` (what its workspace had
    left of its budget for the UTC day when the turn began); ``limit``: that budget's
    whole size (for ``workspace_day``, the day's, of which ``tokens`` were left).
    """

    tokens: Annotated[int, msgspec.Meta(ge=0)]
    budget: Literal["turn", "workspace_day"]
    limit: Annotated[int, msgspec.Meta(ge=0)]

    def describe(self, used: int) -> str:
        """Why a turn that used ``used`` tokens was stopped, in words."""
        if self.budget == "turn":
            return f"the turn used {used} tokens, reaching its budget of {self.tokens} tokens"
        return (
            f"the turn used {used} tokens, reaching what was left of the workspace's budget "
            f"for today ({self.tokens} of {self.limit} tokens when the turn began)"
        )


class Dispatch(msgspec.Struct, frozen=True):
    """What the runner hands the container on stdin (the ``POST /stream`` body).

    ``providers``: the provider variables (:data:`~sandstream.core.providers.PROVIDER_VARS`)
    for the turn's model calls. A runner with a model gateway takes them out and puts
    ``gateway`` in their place, so the container never sees a key; one without passes
    them on, and the container gives them to the agent. ``budget``: the tokens the
    turn's model calls may spend (a runner with a model gateway refuses the calls past
    it and ends the turn ``budget_reached``; ``None``: no bound).
    """

    agent_url: Annotated[str, msgspec.Meta(pattern=r"^https?://")]
    otp_setup: _NonEmpty
    otp_run: _NonEmpty
    prompt: str
    otp_upload: str | None = None
    conversation: list[ChatTurn] | None = None
    extensions: list[str] = msgspec.field(default_factory=list)
    """Envelope extensions the reader understands (``"live"``: ``delta`` and
    ``permission`` lines, :mod:`sandstream.core.envelope`); unknown names are ignored."""
    providers: dict[str, str] = msgspec.field(default_factory=dict)
    gateway: GatewayAccess | None = None
    budget: TokenBudget | None = None


WARM_READY: Final = b"ready\n"
"""What a warm container (``--warm``) writes on its stdout once its imports are done,
before it reads its :class:`WarmBinding`: the runner's pool reads it, never a client."""


class WarmBinding(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The line a warm container reads on stdin before its dispatch, once a turn claims
    it: ``env``, the turn's environment variables, which the container puts into its
    own environment (and so into what it runs) before it reads the dispatch."""

    env: dict[str, str] = msgspec.field(default_factory=dict)


class EnvResponse(msgspec.Struct, frozen=True):
    """``GET {agent_url}/env`` (setup token): the named environment.

    ``vars`` are applied to the setup script, the agent, the skills and the
    claude-code subprocess. ``setup_script`` runs with ``bash`` in the work dir before
    the agent starts; empty means no setup.
    """

    vars: dict[str, str] = msgspec.field(default_factory=dict)
    setup_script: str = ""
    setup_timeout_sec: _Positive = 600.0


class McpServer(msgspec.Struct, frozen=True):
    """An MCP server attached to the agent: a command to spawn or a URL to reach."""

    name: _NonEmpty
    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)


class OpenAIAgent(msgspec.Struct, frozen=True, tag_field="kind", tag="openai"):
    """An OpenAI-compatible Chat Completions tool-calling loop.

    Base URL, key and (unless ``ConfigResponse.model`` is set) the model come from the
    env: ``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``),
    ``OPENAI_API_KEY``, ``OPENAI_MODEL``.
    """

    max_iterations: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 24
    request_timeout_sec: _Positive = 120.0
    temperature: float | None = None
    max_tokens: int | None = None


class ClaudeCodeAgent(msgspec.Struct, frozen=True, tag_field="kind", tag="claude-code"):
    """A Claude Code-style CLI run as ``command + -p --output-format stream-json --verbose``.

    The prompt goes on the CLI's stdin; ``extra_args`` are appended after the standard
    ones (e.g. ``["--max-turns", "8"]``).
    """

    command: Annotated[list[str], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: ["claude"]
    )
    extra_args: list[str] = msgspec.field(default_factory=list)


class ScriptedStep(msgspec.Struct, frozen=True):
    """One tool call of a scripted plan: a real skill run with ``args``.

    ``ask``: the user is asked first (a ``permission`` line, ``live`` extension);
    ``once`` or ``always`` runs the step, ``reject`` (also no answer in time, or no
    reader that can answer) fails it. ``delay_sec``: a pause before the step.
    """

    tool: _NonEmpty
    args: Any = msgspec.field(default_factory=dict)
    ask: bool = False
    delay_sec: _NonNegative = 0.0


class ScriptedError(msgspec.Struct, frozen=True):
    """End the scripted run with this terminal error instead of a result."""

    code: _NonEmpty
    message: str


class LoadSpec(msgspec.Struct, frozen=True):
    """Benchmark load: ``lines`` envelope lines at ``rate`` lines/s (0 = as fast as possible).

    ``payload_bytes`` is the length of each line's payload string (the log
    ``message``, or the step's ``result`` string). ``line_type`` ``"step"`` emits
    ``lines`` step lines as running/succeeded pairs (``lines // 2`` steps).
    """

    lines: Annotated[int, msgspec.Meta(ge=0)]
    rate: _NonNegative = 0.0
    payload_bytes: Annotated[int, msgspec.Meta(ge=0, le=512 * 1024)] = 64
    line_type: Literal["log", "step"] = "log"


class ScriptedAgent(msgspec.Struct, frozen=True, tag_field="kind", tag="scripted"):
    """A deterministic agent: optional load, then ``steps`` (real skills), then ``message``.

    ``message`` may contain ``{prompt}``, replaced by the turn's prompt. With
    ``stop_on_failure`` a failed step ends the run with ``error{code:"step_failed"}``.
    When the reader asked for the ``live`` extension, ``reasoning`` and then the
    message are streamed as ``delta`` lines, a word or so each, ``delta_delay_sec``
    apart; a step that asks waits ``permission_timeout_sec`` for an answer.
    """

    steps: list[ScriptedStep] = msgspec.field(default_factory=list)
    message: str = "Done."
    error: ScriptedError | None = None
    stop_on_failure: bool = False
    load: LoadSpec | None = None
    reasoning: str = ""
    delta_delay_sec: _NonNegative = 0.0
    permission_timeout_sec: _Positive = 600.0


AcpPreset: TypeAlias = Literal["claude", "codex", "opencode", "gemini", "pi"]


class AcpAgent(msgspec.Struct, frozen=True, tag_field="kind", tag="acp"):
    """An agent program driven over the Agent Client Protocol (v1, JSON-RPC on stdio).

    ``preset`` names a known agent (its command and config files come from the preset;
    ``command``, when also set, replaces the preset's command); without a preset,
    ``command`` is required. ``env`` is set for the agent on top of the named
    environment's variables; presets read the provider settings from both. ``mode``:
    the ACP session mode to switch to after ``session/new`` (the preset's default when
    unset). An unanswered permission request is rejected after
    ``permission_timeout_sec``; an agent silent for ``stall_timeout_sec`` while a
    prompt runs ends the run.
    """

    preset: AcpPreset | None = None
    command: Annotated[list[str], msgspec.Meta(min_length=1)] | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    mode: _NonEmpty | None = None
    permission_timeout_sec: _Positive = 600.0
    stall_timeout_sec: _Positive = 600.0

    def __post_init__(self) -> None:
        if self.preset is None and self.command is None:
            raise ValueError("an acp agent needs a preset or a command")


AgentSpec: TypeAlias = OpenAIAgent | ClaudeCodeAgent | ScriptedAgent | AcpAgent


def agent_kind(spec: AgentSpec) -> str:
    """The ``kind`` tag of an agent spec: ``openai``, ``claude-code``, ``scripted``, ``acp``."""
    return str(spec.__struct_config__.tag)


class Attachment(msgspec.Struct, frozen=True):
    """A file the user attached to the turn, for the container to download.

    ``GET {agent_url}/attachments/{id}`` with the run token gives its bytes; the
    container writes them at ``path``, relative to the work dir (always
    ``attachments/<name>``, the name sanitized and unique in the turn), and checks
    ``size`` (and ``sha256`` when set).
    """

    id: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$")]
    path: _NonEmpty
    size: Annotated[int, msgspec.Meta(ge=0)]
    content_type: str = "application/octet-stream"
    sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")] | None = None


class PermissionGrant(msgspec.Struct, frozen=True):
    """An ``always`` the chat keeps: a later permission request whose tool call has this
    ``kind`` and exactly this ``title`` is answered ``always`` without asking."""

    kind: str
    title: str


class ConfigResponse(msgspec.Struct, frozen=True):
    """``GET {agent_url}/config`` (run token): the agent definition and the turn.

    ``skills`` names the skills to offer (``None``: every available skill, ``[]``:
    none). ``prompt`` and ``conversation``, when set, take precedence over the
    dispatch's. ``max_runtime_sec`` is the run's hard cap. ``attachments`` are the
    files the user attached to the turn: the container downloads them into the work
    dir before the setup script runs. ``snapshot``: what the chat's previous turn left
    (its work dir and the agent's home), restored before the setup script runs;
    ``snapshot_max_bytes``: save this turn's, if its files come to no more than that
    (0: save none). ``grants``: the chat's permission grants, answered without asking.
    """

    agent: AgentSpec = msgspec.field(default_factory=OpenAIAgent)
    system_prompt: str = ""
    model: str | None = None
    skills: list[str] | None = None
    mcp_servers: list[McpServer] = msgspec.field(default_factory=list)
    prompt: str | None = None
    conversation: list[ChatTurn] | None = None
    max_runtime_sec: _Positive = DEFAULT_MAX_RUNTIME_SEC
    attachments: list[Attachment] = msgspec.field(default_factory=list)
    snapshot: SnapshotManifest | None = None
    snapshot_max_bytes: Annotated[int, msgspec.Meta(ge=0)] = 0
    grants: list[PermissionGrant] = msgspec.field(default_factory=list)


class ResultFile(msgspec.Struct, frozen=True):
    """One file the workspace stored from a writeback."""

    path: str
    size: int


class ResultsReceipt(msgspec.Struct, frozen=True):
    """``POST {agent_url}/results`` (upload token) answer: the files stored."""

    files: list[ResultFile] = msgspec.field(default_factory=list)


MAX_SNAPSHOT_HASHES: Final = 100_000
"""The most SHA-256s a :class:`BlobHashes` names (and blobs one blob pack holds)."""
_Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]


class BlobHashes(msgspec.Struct, frozen=True):
    """``POST {agent_url}/snapshot/missing`` (upload token) and ``…/snapshot/restore``
    (run token): blobs by SHA-256 (lowercase hex), at most :data:`MAX_SNAPSHOT_HASHES`."""

    sha256: Annotated[list[_Sha256], msgspec.Meta(max_length=MAX_SNAPSHOT_HASHES)]


class MissingBlobs(msgspec.Struct, frozen=True):
    """``POST {agent_url}/snapshot/missing`` answer: the blobs asked for that the
    workspace does not store, each once, in the order asked."""

    missing: list[str]


class StoredBlobs(msgspec.Struct, frozen=True):
    """``POST {agent_url}/snapshot/blobs`` (upload token) answer: the blobs of the pack,
    each stored (once, by its SHA-256)."""

    stored: int


class SnapshotReceipt(msgspec.Struct, frozen=True):
    """``PUT {agent_url}/snapshot`` (upload token) answer: the snapshot stored, its
    regular files and their bytes (:class:`~.snapshots.SnapshotManifest`'s
    ``files`` and ``total_bytes``)."""

    id: str
    files: int
    total_bytes: int = msgspec.field(name="bytes")


class SkillSpec(msgspec.Struct, frozen=True):
    """One skill in a ``manifest.json``: an executable recipe and its argument schema.

    ``run`` is a path relative to the manifest's folder: ``*.py`` runs with the
    container's Python, ``*.sh`` with bash, anything else is executed directly.
    ``parameters`` is the JSON schema of the args object (offered to the model as the
    function's parameters).
    """

    name: SkillName
    description: str
    run: _NonEmpty
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    timeout_sec: _Positive = 60.0


class SkillManifest(msgspec.Struct, frozen=True):
    """A skills folder's ``manifest.json``."""

    skills: list[SkillSpec]


class UserMessage(msgspec.Struct, frozen=True, tag_field="type", tag="message"):
    """One user message for the running agent: a line on stdin after the dispatch."""

    text: str


class PermissionAnswer(msgspec.Struct, frozen=True, tag_field="type", tag="permission"):
    """The user's answer to the agent's permission request ``id``: a line on stdin.

    ``once``, ``always`` and ``reject`` pick the agent's option of kind
    ``allow_once``, ``allow_always`` and ``reject_once`` (each falling back to its
    sibling when the agent offers only that one).
    """

    id: _NonEmpty
    reply: Literal["once", "always", "reject"]


InboundMessage: TypeAlias = UserMessage | PermissionAnswer
"""Any line on the container's stdin after the dispatch."""
