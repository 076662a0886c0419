"""The NDJSON envelope: the four line types a sandbox emits, as msgspec Structs.

Every line is a JSON object with a ``type`` tag (``log``, ``step``, ``result`` or
``error``) and an optional ``ts`` (Unix epoch milliseconds). The types here are
both what producers construct (``Step(id=..., args={...})``) and what the core
decodes: the core decodes ``Step[msgspec.Raw]`` so that nested ``args`` and
``result`` payloads are validated as JSON but never materialized on the hot path.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeAlias, TypeVar

import msgspec

__all__ = [
    "Envelope",
    "Error",
    "Log",
    "LogLevel",
    "Result",
    "Step",
    "StepStatus",
    "encode_line",
]

LogLevel: TypeAlias = Literal["debug", "info", "warn", "error"]
StepStatus: TypeAlias = Literal["running", "succeeded", "failed"]

Payload = TypeVar("Payload")

NonEmptyStr: TypeAlias = Annotated[str, msgspec.Meta(min_length=1)]
EpochMs: TypeAlias = Annotated[int, msgspec.Meta(ge=0)]


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


Envelope: TypeAlias = Log | Step[Any] | Result | Error
"""Any envelope line, as producers build it."""

WireEnvelope: TypeAlias = Log | Step[msgspec.Raw] | Result | Error
"""Any envelope line, as the core decodes it (step payloads kept as raw JSON)."""

_encoder = msgspec.json.Encoder()


def encode_line(envelope: Envelope) -> bytes:
    """Encode one envelope as an NDJSON line, ``\\n`` included.

    Raises ``TypeError`` if a payload holds a value JSON cannot represent.
    """
    return _encoder.encode(envelope) + b"\n"


def new_wire_decoder() -> msgspec.json.Decoder[WireEnvelope]:
    """A decoder for one line of the envelope, validating every field."""
    return msgspec.json.Decoder(WireEnvelope)
