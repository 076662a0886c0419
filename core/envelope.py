"""The NDJSON envelope: the four line types a sandbox emits, as msgspec Structs.

Every line is a JSON object with a ``type`` tag (``log``, ``step``, ``result`` or
``error``) and an optional ``ts`` (Unix epoch milliseconds). The ``live`` extension,
which a dispatch asks for (``Dispatch.extensions``), adds ``delta`` (live text and
reasoning) and ``permission`` (a question to the user and its answer) lines; the
``usage`` extension adds ``usage`` lines (the tokens of one model call); a strict
consumer that did not ask for an extension never sees its lines. The types here are
both what producers construct (``Step(id=..., args={...})``) and what the core
decodes: the core decodes ``Step[msgspec.Raw]`` so that nested ``args`` and
``result`` payloads are validated as JSON but never materialized on the hot path.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Generic, Literal, TypeAlias, TypeVar

import msgspec

__all__ = [
    "LIVE_EXTENSION",
    "USAGE_EXTENSION",
    "Delta",
    "DeltaKind",
    "Envelope",
    "Error",
    "LiveEnvelope",
    "Log",
    "LogLevel",
    "ModelProtocol",
    "ModelUsage",
    "Permission",
    "PermissionAnsweredBy",
    "PermissionOption",
    "PermissionOptionKind",
    "PermissionReply",
    "PermissionStatus",
    "Result",
    "Step",
    "StepStatus",
    "encode_line",
]

LogLevel: TypeAlias = Literal["debug", "info", "warn", "error"]
StepStatus: TypeAlias = Literal["running", "succeeded", "failed"]
DeltaKind: TypeAlias = Literal["text", "reasoning"]
PermissionStatus: TypeAlias = Literal["pending", "resolved"]
PermissionOptionKind: TypeAlias = Literal[
    "allow_once", "allow_always", "reject_once", "reject_always"
]
PermissionReply: TypeAlias = Literal["once", "always", "reject", "cancelled"]
"""How a permission request ended: the user's ``once``/``always``/``reject`` (also
``reject`` when nobody answered in time), or ``cancelled`` by an interrupt."""
ModelProtocol: TypeAlias = Literal["anthropic", "chat", "responses", "gemini"]
"""The wire protocol of a model call: ``anthropic`` (Anthropic Messages), ``chat``
(OpenAI Chat Completions), ``responses`` (OpenAI Responses), ``gemini`` (Gemini
``generateContent`` / ``streamGenerateContent``)."""
PermissionAnsweredBy: TypeAlias = Literal["grant"]
"""Who answered a request when not the user: ``grant``, an earlier ``always`` of the chat."""

LIVE_EXTENSION: Final = "live"
"""The envelope extension that adds :class:`Delta` and :class:`Permission` lines."""

USAGE_EXTENSION: Final = "usage"
"""The envelope extension that adds :class:`ModelUsage` lines."""

Payload = TypeVar("Payload")

NonEmptyStr: TypeAlias = Annotated[str, msgspec.Meta(min_length=1)]
EpochMs: TypeAlias = Annotated[int, msgspec.Meta(ge=0)]
Tokens: TypeAlias = Annotated[int, msgspec.Meta(ge=0)]


class Log(msgspec.Struct, tag_field="type", tag="log", omit_defaults=True, gc=False):
    """Free-form diagnostic line; filtered out of the chat stream, kept in traces."""

    level: LogLevel
    message: str
    ts: EpochMs | None = None


class Step(
    msgspec.Struct,
    Generic[Payload],
    tag_field="type",
    tag="step",
    rename="camel",
    omit_defaults=True,
    gc=False,
):
    """One tool call of the agent loop: ``running``, then ``succeeded`` or ``failed``.

    Lines with the same ``id`` update one step row. ``args`` and ``result`` are any
    JSON value; ``error`` carries the message of a failed step.
    """

    id: NonEmptyStr
    name: NonEmptyStr
    status: StepStatus
    args: Payload = None  # type: ignore[assignment]
    result: Payload = None  # type: ignore[assignment]
    error: str | None = None
    duration_ms: int | float | None = None
    ts: EpochMs | None = None


class Result(msgspec.Struct, tag_field="type", tag="result", omit_defaults=True, gc=False):
    """The final assistant message: exactly one terminal per turn."""

    message: str
    ts: EpochMs | None = None


class Error(msgspec.Struct, tag_field="type", tag="error", omit_defaults=True, gc=False):
    """Terminal failure, in place of ``Result``. ``code`` is machine-readable."""

    code: NonEmptyStr
    message: str
    ts: EpochMs | None = None


class Delta(msgspec.Struct, tag_field="type", tag="delta", omit_defaults=True, gc=False):
    """A piece of live text or reasoning of message ``id`` (``live`` extension).

    The pieces of one ``id`` concatenate, in order, to that message; the ``text``
    pieces of a turn, all ids in order, to its ``result`` message.
    """

    id: NonEmptyStr
    kind: DeltaKind
    text: Annotated[str, msgspec.Meta(min_length=1)]
    ts: EpochMs | None = None


class PermissionOption(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One answer the agent offers; ``kind`` says what it means, ``name`` shows it."""

    id: NonEmptyStr
    kind: PermissionOptionKind
    name: str = ""


class Permission(msgspec.Struct, tag_field="type", tag="permission", omit_defaults=True, gc=False):
    """The agent asks the user (``live`` extension): ``pending``, then ``resolved``.

    Lines with the same ``id`` (the request) update one request. ``pending`` carries
    ``options`` and, when the request is about a tool call, ``step`` (the id of the
    step it would run), a ``title`` and ``tool_kind`` (the tool call's kind: ACP's
    ``execute``, ``edit``, …); ``resolved`` carries the ``reply`` and, when a grant of
    the chat answered it without asking, ``by: "grant"``.
    """

    id: NonEmptyStr
    status: PermissionStatus
    step: NonEmptyStr | None = None
    title: str | None = None
    tool_kind: str | None = None
    options: list[PermissionOption] | None = None
    reply: PermissionReply | None = None
    by: PermissionAnsweredBy | None = None
    ts: EpochMs | None = None


class ModelUsage(msgspec.Struct, tag_field="type", tag="usage", omit_defaults=True, gc=False):
    """The tokens of one model call of the agent (``usage`` extension).

    ``protocol`` is the call's wire protocol and ``model`` the model the provider named
    in its answer. The counts are those of :class:`~sandstream.core.model_usage.Usage`:
    ``input_tokens`` uncached input, ``cached_input_tokens`` input read from the
    provider's cache, ``cache_write_tokens`` input written to it (Anthropic's), and
    ``output_tokens`` output, reasoning included. ``complete`` is false when the answer
    ended before its final usage (a cut stream): the counts are then what it had said.
    ``status`` is the HTTP status the provider answered (``None``: no answer came);
    ``error``, on a failed call (a 5xx or 429 answer, or none, or one cut), says what
    went wrong, in the provider's words when it gave some.
    """

    protocol: ModelProtocol
    input_tokens: Tokens
    output_tokens: Tokens
    cached_input_tokens: Tokens
    cache_write_tokens: Tokens
    model: str | None = None
    complete: bool = True
    status: Annotated[int, msgspec.Meta(ge=100, le=599)] | None = None
    error: str | None = None
    ts: EpochMs | None = None


Envelope: TypeAlias = Log | Step[Any] | Result | Error
"""Any line of the four strict types, as producers build it."""

LiveEnvelope: TypeAlias = Envelope | Delta | Permission
"""Any envelope line a producer may emit when the ``live`` extension is asked for."""

WireEnvelope: TypeAlias = Log | Step[msgspec.Raw] | Result | Error
"""Any envelope line, as the core decodes it (step payloads kept as raw JSON)."""

LiveWireEnvelope: TypeAlias = WireEnvelope | Delta | Permission
"""Any envelope line with the ``live`` extension, as the core decodes it."""

AnyEnvelope: TypeAlias = LiveEnvelope | ModelUsage
"""Any envelope line of any extension, as producers build it."""

_encoder = msgspec.json.Encoder()


def encode_line(envelope: AnyEnvelope) -> bytes:
    """Encode one envelope as an NDJSON line, ``\\n`` included.

    Raises ``TypeError`` if a payload holds a value JSON cannot represent.
    """
    return _encoder.encode(envelope) + b"\n"


def new_wire_decoder() -> msgspec.json.Decoder[WireEnvelope]:
    """A decoder for one line of the envelope, validating every field."""
    return msgspec.json.Decoder(WireEnvelope)


def new_live_wire_decoder() -> msgspec.json.Decoder[LiveWireEnvelope]:
    """A decoder for one line of the envelope with the ``live`` extension's lines."""
    return msgspec.json.Decoder(LiveWireEnvelope)


def new_usage_wire_decoder(*, live: bool) -> msgspec.json.Decoder[LiveWireEnvelope | ModelUsage]:
    """A decoder for one line of the envelope with the ``usage`` extension's lines (and
    the ``live`` extension's when ``live``)."""
    if live:
        return msgspec.json.Decoder(LiveWireEnvelope | ModelUsage)
    return msgspec.json.Decoder(WireEnvelope | ModelUsage)
