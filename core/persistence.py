"""Persisted chat messages: a turn folded into content blocks, and replay.

The assistant message of a turn holds its text, its step trace and each step's
structured tool output, so a history reload renders what the live stream rendered.
Payloads over a display bound are stored as a truncated preview with their full
size recorded; steps the turn did not keep (its step bounds,
:class:`~.turn.Turn`) are counted in a :class:`StepsOmittedBlock`, so the stored
message stays bounded whatever the sandbox sends. Of the ``live`` extension's lines
the message keeps the folded reasoning (one :class:`ReasoningBlock`) and each
permission request with its outcome (:class:`PermissionBlock`), never the deltas
one by one: its text is the ``result``. Replay reads only
:func:`replay_text`, which the store keeps beside the message. Pure functions; ids
and timestamps come from the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, TypeAlias

import msgspec

from .envelope import (
    PermissionAnsweredBy,
    PermissionOption,
    PermissionReply,
    PermissionStatus,
    StepStatus,
)
from .model_usage import Usage
from .schemas import ChatTurn
from .turn import PermissionRow, StepRow, Turn

__all__ = [
    "DEFAULT_DISPLAY_BYTES",
    "REPLAY_TURN_LIMIT",
    "ContentBlock",
    "ErrorBlock",
    "MessageStatus",
    "MessageUsage",
    "PermissionBlock",
    "PersistedFileAttachment",
    "PersistedMessage",
    "ReasoningBlock",
    "StepTrace",
    "StepTraceBlock",
    "StepsOmittedBlock",
    "TextBlock",
    "ToolOutputBlock",
    "TraceStatus",
    "assistant_message",
    "message_usage",
    "permission_block",
    "replay_text",
    "replay_window",
    "user_message",
]

DEFAULT_DISPLAY_BYTES: Final = 16 * 1024
"""Payloads whose JSON is longer than this are stored as a truncated preview."""

REPLAY_TURN_LIMIT: Final = 20
"""How many past messages a dispatch sends the sandbox as its conversation."""

Role: TypeAlias = Literal["user", "assistant"]
MessageStatus: TypeAlias = Literal["complete", "failed", "cancelled", "interrupted"]
TraceStatus: TypeAlias = StepStatus | Literal["cancelled"]
"""A persisted step's status: the envelope's, or ``cancelled`` (closed by its turn's
cancellation). A settled turn's message has no ``running`` step."""


class _Block(msgspec.Struct, tag_field="type", rename="camel", omit_defaults=True):
    pass


class TextBlock(_Block, tag="text"):
    """Message text: the user's words, or the assistant's final ``result`` (in a turn
    that ended without one, the text its deltas streamed, if any)."""

    text: str


class ReasoningBlock(_Block, tag="reasoning"):
    """The turn's reasoning deltas folded into one text (as far as the turn kept
    them: ``Turn(max_text_chars=...)``), shown folded away."""

    text: str


class PermissionBlock(_Block, tag="permission"):
    """A permission request of the turn and its outcome: asked what (``title``,
    ``options``, the tool call's ``tool_kind``), about which ``step``, answered how
    (``reply``) and, when a grant of the chat answered it, ``by: "grant"``.

    ``pending`` only while the turn is live; in an ended turn an unanswered request
    is stored ``resolved`` with reply ``cancelled``.
    """

    id: str
    status: PermissionStatus
    options: list[PermissionOption]
    step: str | None = None
    title: str | None = None
    reply: PermissionReply | None = None
    tool_kind: str | None = None
    by: PermissionAnsweredBy | None = None


class StepTrace(msgspec.Struct, rename="camel", omit_defaults=True):
    """One step row as persisted; ``args`` may be a truncated preview string.

    A step still running when its turn ended is closed by :func:`assistant_message`:
    ``cancelled`` (turn cancelled or interrupted) or ``failed``, with an ``error`` that says why.

    ``omitted_bytes``: bytes of the step's later lines whose payloads the turn did
    not keep (its byte bound), so neither ``args`` nor the output shows them.
    """

    id: str
    name: str
    status: TraceStatus
    args: Any = None
    args_truncated: bool = False
    args_size: int = 0
    error: str | None = None
    duration_ms: int | float | None = None
    first_ts: int | None = None
    last_ts: int | None = None
    omitted_bytes: int = 0


class StepTraceBlock(_Block, tag="steps"):
    """The turn's steps in first-seen order, as the live stream showed them."""

    steps: list[StepTrace]


class ToolOutputBlock(_Block, tag="tool_output"):
    """A step's ``result``; over the display bound, a preview with ``size`` the full length."""

    step_id: str
    name: str
    output: Any
    truncated: bool = False
    size: int = 0


class StepsOmittedBlock(_Block, tag="steps_omitted"):
    """``steps`` more steps, ``bytes`` bytes of step lines, streamed but not stored.

    ``message`` says so in words (``"1234 more steps omitted (5678 bytes)"``).
    """

    steps: int
    bytes: int
    message: str


class ErrorBlock(_Block, tag="error"):
    """Why the turn ended without a result (``code`` as in the ``error`` line)."""

    code: str
    message: str


ContentBlock: TypeAlias = (
    TextBlock
    | ReasoningBlock
    | StepTraceBlock
    | ToolOutputBlock
    | PermissionBlock
    | StepsOmittedBlock
    | ErrorBlock
)


class PersistedFileAttachment(msgspec.Struct, rename="camel", omit_defaults=True):
    """A chat-bag file referenced by a message."""

    id: str
    name: str
    size: int
    content_type: str = "application/octet-stream"
    sha256: str | None = None


class MessageUsage(msgspec.Struct, rename="camel", omit_defaults=True):
    """The tokens of a turn's model calls (or of a chat's turns), as stored: the sums
    of their ``usage`` lines (docs/protocol.md, "The usage extension")."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    model_calls: int = 0

    @property
    def tokens(self) -> Usage:
        """The token counts alone (their :attr:`~.model_usage.Usage.total`, their sums)."""
        return Usage(
            self.input_tokens,
            self.output_tokens,
            self.cached_input_tokens,
            self.cache_write_tokens,
        )


class PersistedMessage(msgspec.Struct, rename="camel", omit_defaults=True):
    """One message of a conversation, stored one row per message."""

    id: str
    role: Role
    content: list[ContentBlock]
    created_at: int
    file_attachments: list[PersistedFileAttachment] = msgspec.field(default_factory=list)
    status: MessageStatus | None = None
    """Assistant messages only: how the turn settled."""
    usage: MessageUsage | None = None
    """Assistant messages only: the tokens of the turn's model calls, when they were
    metered (its dispatch asked for the ``usage`` extension and the turn made some)."""

    @property
    def text(self) -> str:
        """The message's text blocks, joined by blank lines."""
        return "\n\n".join(block.text for block in self.content if type(block) is TextBlock)


def user_message(
    message_id: str,
    text: str,
    *,
    created_at: int,
    attachments: Sequence[PersistedFileAttachment] = (),
) -> PersistedMessage:
    """The persisted form of a user's message."""
    return PersistedMessage(
        id=message_id,
        role="user",
        content=[TextBlock(text)],
        created_at=created_at,
        file_attachments=list(attachments),
    )


def assistant_message(
    turn: Turn,
    *,
    message_id: str,
    created_at: int,
    attachments: Sequence[PersistedFileAttachment] = (),
    display_bytes: int = DEFAULT_DISPLAY_BYTES,
) -> PersistedMessage:
    """Fold a turn's state into its assistant message.

    A turn that has not ended yet is folded as it stands, with status ``failed``;
    callers settle it first (``StreamProcessor.close``/``cancel``/``fail``). In an
    ended turn, every step still ``running`` is closed (:func:`_closed_step`), so a
    history reload never shows a step that runs forever, and every permission request
    still pending is stored ``resolved`` with reply ``cancelled``.

    The blocks, each only when the turn has one: reasoning, text, steps, tool
    outputs, permission requests, omitted steps, error.
    """
    rows = turn.steps
    content: list[ContentBlock] = []
    reasoning = turn.reasoning
    if reasoning:
        content.append(ReasoningBlock(reasoning))
    if turn.result is not None:
        content.append(TextBlock(turn.result.message))
    elif turn.parts and (text := turn.text):
        content.append(TextBlock(text))
    if rows:
        traces = [_step_trace(row, display_bytes) for row in rows]
        if turn.ended:
            traces = [_closed_step(trace, turn) for trace in traces]
        content.append(StepTraceBlock(traces))
        for row in rows:
            if row.result is not None:
                output, truncated, size = _bounded(row.result, display_bytes)
                content.append(ToolOutputBlock(row.id, row.name, output, truncated, size))
    content.extend(permission_block(row, ended=turn.ended) for row in turn.permissions.values())
    if turn.omitted_steps:
        steps, size = turn.omitted_steps, turn.omitted_bytes
        note = f"{steps} more step{'' if steps == 1 else 's'} omitted ({size} bytes)"
        content.append(StepsOmittedBlock(steps, size, note))
    error = turn.error
    if error is not None:
        content.append(ErrorBlock(error.code, error.message))
    status: MessageStatus = "complete" if turn.result is not None else "failed"
    if error is not None and error.code in _STOPPED:
        status = error.code  # type: ignore[assignment]
    return PersistedMessage(
        id=message_id,
        role="assistant",
        content=content,
        created_at=created_at,
        file_attachments=list(attachments),
        status=status,
        usage=message_usage(turn),
    )


def message_usage(turn: Turn) -> MessageUsage | None:
    """The tokens of ``turn``'s metered model calls as a message stores them (``None``:
    it has none)."""
    if not turn.model_calls:
        return None
    usage = turn.usage
    return MessageUsage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens,
        usage.cache_write_tokens,
        turn.model_calls,
    )


def replay_window(
    messages: Iterable[PersistedMessage], limit: int = REPLAY_TURN_LIMIT
) -> list[ChatTurn]:
    """The last ``limit`` messages as ``ChatTurn``s, oldest first.

    An assistant message with no text stands as its error (``[code] message``);
    attachments are named so the sandbox knows they exist.
    """
    if limit <= 0:
        return []
    window = list(messages)[-limit:]
    return [ChatTurn(m.role, replay_text(m), m.created_at) for m in window]


def replay_text(message: PersistedMessage) -> str:
    """What replay sends of ``message``: its text, else its errors (``[code] message``),
    and the names of its attachments."""
    parts = [message.text] if message.text else []
    if not parts:
        parts.extend(
            f"[{block.code}] {block.message}"
            for block in message.content
            if type(block) is ErrorBlock
        )
    if message.file_attachments:
        names = ", ".join(a.name for a in message.file_attachments)
        parts.append(f"[attached: {names}]")
    return "\n\n".join(parts)


def _step_trace(row: StepRow, display_bytes: int) -> StepTrace:
    args, truncated, size = _bounded(row.args, display_bytes)
    return StepTrace(
        id=row.id,
        name=row.name,
        status=row.status,
        args=args,
        args_truncated=truncated,
        args_size=size,
        error=row.error,
        duration_ms=row.duration_ms,
        first_ts=row.first_ts,
        last_ts=row.last_ts,
        omitted_bytes=row.omitted_bytes,
    )


def permission_block(row: PermissionRow, *, ended: bool) -> PermissionBlock:
    """``row`` as stored; still pending in an ended turn, it is closed ``cancelled``."""
    if ended and row.status == "pending":
        return PermissionBlock(
            row.id, "resolved", row.options, row.step, row.title, "cancelled", row.tool_kind
        )
    return PermissionBlock(
        row.id, row.status, row.options, row.step, row.title, row.reply, row.tool_kind, row.by
    )


_STOPPED: Final = ("cancelled", "interrupted")
"""Error codes of a turn that was stopped (by its client, or by the stop button)."""


def _closed_step(trace: StepTrace, turn: Turn) -> StepTrace:
    """``trace`` closed if it is still running in the ended ``turn``: ``cancelled``
    when the turn was cancelled or interrupted, else ``failed``, with the turn's
    reason as ``error``."""
    if trace.status != "running":
        return trace
    error = turn.error
    if error is None:
        status: TraceStatus = "failed"
        reason = "the turn ended before this step finished"
    elif error.code in _STOPPED:
        status, reason = "cancelled", f"the turn was {error.code}: {error.message}"
    else:
        status = "failed"
        reason = f"the turn ended before this step finished: [{error.code}] {error.message}"
    return msgspec.structs.replace(trace, status=status, error=reason)


def _bounded(raw: msgspec.Raw | None, display_bytes: int) -> tuple[Any, bool, int]:
    """``(value, truncated, size)``: the JSON value, or a UTF-8-safe preview string."""
    if raw is None:
        return None, False, 0
    size = len(raw)
    if size <= display_bytes:
        return raw, False, size
    preview = bytes(memoryview(raw)[:display_bytes]).decode("utf-8", errors="ignore")
    return preview, True, size
