"""The chat's SSE turned into the Vercel AI SDK UI message stream (``useChat``'s wire).

Sans-IO: feed it the chat stream's bytes (as :class:`~sandstream.core.StreamProcessor`
writes them) in any chunking; write out what it returns::

    stream = UIMessageStream(message_id="msg_1")
    out = stream.feed(chunk)   # bytes of UI message stream frames (maybe b"")
    out += stream.close()      # end of input: the stream is always finished

The chunks it makes: docs/chat.md, "AI SDK (useChat)"; every frame is valid for
``ai`` 5, 6 and 7, and chunks only a later version knows are sent only to a client
that states that version (``ai_version``). A ``usage`` frame (one model call's
tokens) becomes a ``message-metadata`` chunk with the turn's sums so far
(``{"usage": MessageUsage}``, the stored message's ``usage``), also on ``finish``.
Bad input: a ``step``, ``result``, ``error``, ``delta``, ``permission``, ``usage``
or ``files`` frame whose data is not what the chat sends raises
:class:`UIMessageStreamError` (the stream accepts nothing more).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from typing import Final

import msgspec

from .envelope import (
    Delta,
    DeltaKind,
    Error,
    LiveWireEnvelope,
    ModelUsage,
    Permission,
    Result,
    Step,
    new_live_wire_decoder,
)
from .errors import SSEParseError, UIMessageStreamError
from .live import LiveFold
from .persistence import (
    MessageUsage,
    PermissionBlock,
    PersistedFileAttachment,
    StepTraceBlock,
    assistant_message,
    message_usage,
    permission_block,
)
from .sse import PING, format_event
from .sse_parser import Comment, ServerSentEvent, SSEParser
from .turn import Turn

__all__ = ["UI_MESSAGE_STREAM_HEADERS", "UIMessageStream"]

UI_MESSAGE_STREAM_HEADERS: Final = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Vercel-AI-UI-Message-Stream": "v1",
    "X-Accel-Buffering": "no",
}
"""The response headers of the stream: those of the AI SDK's own
``createUIMessageStreamResponse``, less ``Connection`` (HTTP/2 forbids it), plus
``X-Accel-Buffering: no`` so a proxy does not hold the frames back."""

DONE: Final = b"data: [DONE]\n\n"
TEXT_PART_ID: Final = "text"
"""The id of the text part that carries the ``result`` when it was not streamed as
``delta`` lines (ids are per message)."""
PERMISSION_DATA: Final = "data-permission"
"""The data part type of a permission request (``id``: the request's id)."""
_NULL: Final = msgspec.Raw(b"null")


class _Chunk(msgspec.Struct, tag_field="type", rename="camel", omit_defaults=True):
    pass


class _Start(_Chunk, tag="start"):
    message_id: str


class _ToolInputAvailable(_Chunk, tag="tool-input-available"):
    tool_call_id: str
    tool_name: str
    input: msgspec.Raw
    dynamic: bool  # required here, so omit_defaults never drops it


class _ToolOutputAvailable(_Chunk, tag="tool-output-available"):
    tool_call_id: str
    output: msgspec.Raw
    dynamic: bool


class _ToolOutputError(_Chunk, tag="tool-output-error"):
    tool_call_id: str
    error_text: str
    dynamic: bool


class _File(_Chunk, tag="file"):
    url: str
    media_type: str


class _TextStart(_Chunk, tag="text-start"):
    id: str


class _TextDelta(_Chunk, tag="text-delta"):
    id: str
    delta: str


class _TextEnd(_Chunk, tag="text-end"):
    id: str


class _ReasoningStart(_Chunk, tag="reasoning-start"):
    id: str


class _ReasoningDelta(_Chunk, tag="reasoning-delta"):
    id: str
    delta: str


class _ReasoningEnd(_Chunk, tag="reasoning-end"):
    id: str


class _PermissionData(_Chunk, tag=PERMISSION_DATA):
    id: str
    data: PermissionBlock


class _ToolApprovalRequest(_Chunk, tag="tool-approval-request"):
    approval_id: str
    tool_call_id: str


class _ToolApprovalResponse(_Chunk, tag="tool-approval-response"):
    approval_id: str
    approved: bool
    reason: str


class _Error(_Chunk, tag="error"):
    error_text: str


class _Metadata(msgspec.Struct, omit_defaults=True):
    """The message's metadata: the tokens of the turn's model calls so far."""

    usage: MessageUsage | None = None


class _MessageMetadata(_Chunk, tag="message-metadata"):
    message_metadata: _Metadata


class _Finish(_Chunk, tag="finish"):
    message_metadata: _Metadata | None = None


class _Files(msgspec.Struct):
    files: list[PersistedFileAttachment]


_encode: Final = msgspec.json.Encoder().encode
_decode_files: Final = msgspec.json.Decoder(_Files).decode
_decode_line: Final = new_live_wire_decoder().decode
_decode_usage: Final = msgspec.json.Decoder(ModelUsage).decode
_ENVELOPE_EVENTS: Final = frozenset({"step", "result", "error", "delta", "permission"})
_PART_CHUNKS: Final = {
    "text": (_TextStart, _TextDelta, _TextEnd),
    "reasoning": (_ReasoningStart, _ReasoningDelta, _ReasoningEnd),
}
APPROVALS_SINCE: Final = 6
"""The first ``ai`` major version that knows ``tool-approval-request``."""
APPROVAL_RESPONSES_SINCE: Final = 7
"""The first ``ai`` major version that knows ``tool-approval-response``."""


class UIMessageStream:
    """Translate one turn's chat SSE into the UI message stream of ``message_id``.

    ``ai_version`` is the major version of the client's ``ai`` package, as the
    client states it (5 when it does not): it decides whether permission requests
    also become tool approvals. Not thread-safe. Memory: the SSE parser's bounds,
    the id and name of each step still running, the turn's permission requests (at
    most :data:`~.live.DEFAULT_MAX_PERMISSIONS`), and a hash of the streamed text.
    """

    __slots__ = (
        "_approvals",
        "_file_url",
        "_finished",
        "_open_part",
        "_open_steps",
        "_parser",
        "_permissions",
        "_started",
        "_streamed",
        "_usage",
        "ai_version",
        "message_id",
    )

    def __init__(
        self,
        message_id: str,
        *,
        file_url: Callable[[str], str] | None = None,
        ai_version: int = 5,
    ) -> None:
        self.message_id = message_id
        self.ai_version = ai_version
        self._file_url = file_url
        self._parser = SSEParser(include_comments=True)
        self._started = False
        self._finished = False
        self._open_steps: dict[str, str] = {}
        """Running steps: id → name."""
        self._open_part: tuple[DeltaKind, str] | None = None
        """The text or reasoning part being streamed: its kind and id."""
        self._streamed: hashlib._Hash | None = None
        """SHA-256 of the text streamed so far (``None``: no text delta yet)."""
        self._permissions = LiveFold(max_text_chars=0)
        self._approvals: set[str] = set()
        """Requests sent as ``tool-approval-request`` and not answered yet."""
        self._usage = Turn(max_steps=0, max_step_bytes=0)
        """The turn's ``usage`` frames folded (only its sums are read)."""

    @property
    def finished(self) -> bool:
        """True once ``finish`` and ``[DONE]`` were returned: nothing more will be."""
        return self._finished

    def feed(self, data: bytes) -> bytes:
        """Consume a chunk of the chat's SSE; return the UI frames it completes (the
        first call's begin with ``start``).

        Raises :class:`UIMessageStreamError` for a frame that is not the chat's, or
        an input over the SSE parser's bounds (then the stream accepts nothing more);
        input after the terminal is ignored.
        """
        if self._finished:
            return b""
        try:
            items = self._parser.feed(data)
        except SSEParseError as exc:
            self._finished = True
            raise UIMessageStreamError(str(exc)) from exc
        return self._start() + self._translate(items)

    def close(self, reason: str = "the turn's stream ended before its result") -> bytes:
        """End of input: the frames still owed, ending with ``finish`` and ``[DONE]``.

        A stream that ended without a terminal ends with an ``error`` carrying
        ``reason`` (its running steps closed as for an ``upstream_closed`` turn).
        Idempotent: later calls return ``b""``.
        """
        if self._finished:
            return b""
        return self._start() + self._terminal(Error(code="upstream_closed", message=reason))

    # -- internals ---------------------------------------------------------------------

    def _translate(self, items: list[ServerSentEvent | Comment]) -> bytes:
        out: list[bytes] = []
        for item in items:
            if self._finished:
                break
            if isinstance(item, Comment):
                out.append(PING)
            elif item.event in _ENVELOPE_EVENTS:
                envelope = self._envelope(item.event, item.data)
                kind = type(envelope)
                if kind is Delta:
                    out.append(self._delta(envelope))  # type: ignore[arg-type]
                    continue
                out.append(self._end_part())
                if kind is Step:
                    out.append(self._step(envelope))  # type: ignore[arg-type]
                elif kind is Permission:
                    out.append(self._permission(envelope))  # type: ignore[arg-type]
                else:
                    out.append(self._terminal(envelope))  # type: ignore[arg-type]
            elif item.event == "usage":
                out.append(self._model_call(item.data))
            elif item.event == "files" and self._file_url is not None:
                out.append(self._end_part() + self._files(item.data, self._file_url))
        return b"".join(out)

    def _model_call(self, data: str) -> bytes:
        """A model call's ``usage`` frame: the turn's sums so far, as message metadata."""
        try:
            line = _decode_usage(data.encode())
        except (msgspec.DecodeError, RecursionError) as exc:
            self._finished = True
            raise UIMessageStreamError(f"a 'usage' frame's data is no usage line: {exc}") from exc
        self._usage.fold_usage(line)
        return _frame(_MessageMetadata(self._metadata()))

    def _metadata(self) -> _Metadata:
        return _Metadata(message_usage(self._usage))

    def _files(self, data: str, file_url: Callable[[str], str]) -> bytes:
        try:
            files = _decode_files(data.encode()).files
        except (msgspec.DecodeError, RecursionError) as exc:
            self._finished = True
            raise UIMessageStreamError(f"a 'files' frame's data is no file list: {exc}") from exc
        return b"".join(_frame(_File(file_url(f.id), f.content_type)) for f in files)

    def _envelope(self, event: str, data: str) -> LiveWireEnvelope:
        try:
            envelope = _decode_line(data.encode())
        except (msgspec.DecodeError, RecursionError) as exc:
            self._finished = True
            raise UIMessageStreamError(
                f"a {event!r} frame's data is no envelope line: {exc}"
            ) from exc
        kind = envelope.__struct_config__.tag
        if kind != event:
            self._finished = True
            raise UIMessageStreamError(f"a {event!r} frame holds a {kind!r} line")
        return envelope

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        return _frame(_Start(self.message_id))

    def _delta(self, delta: Delta) -> bytes:
        """The delta as a piece of its part, which starts (ending the open one) when
        the delta's kind or id differ from the open part's."""
        start, piece, _ = _PART_CHUNKS[delta.kind]
        out = b""
        key = (delta.kind, delta.id)
        if self._open_part != key:
            out = self._end_part() + _frame(start(delta.id))
            self._open_part = key
        if delta.kind == "text":
            if self._streamed is None:
                self._streamed = hashlib.sha256()
            self._streamed.update(delta.text.encode())
        return out + _frame(piece(delta.id, delta.text))

    def _end_part(self) -> bytes:
        """The end of the open text or reasoning part, if one is open."""
        if self._open_part is None:
            return b""
        kind, part_id = self._open_part
        self._open_part = None
        return _frame(_PART_CHUNKS[kind][2](part_id))

    def _permission(self, permission: Permission) -> bytes:
        """The request as its ``data-permission`` part (the stored block); for a client
        of ``ai`` 6 or later also a tool approval of its step, while that step runs."""
        violation = self._permissions.fold_permission(permission)
        if violation is not None:
            self._finished = True
            raise UIMessageStreamError(f"a 'permission' frame breaks a rule: {violation[1]}")
        request_id = permission.id
        row = self._permissions.permissions[request_id]
        out = _frame(_PermissionData(request_id, permission_block(row, ended=False)))
        if row.status == "pending":
            if self.ai_version >= APPROVALS_SINCE and row.step in self._open_steps:
                self._approvals.add(request_id)
                out += _frame(_ToolApprovalRequest(request_id, row.step))
        elif request_id in self._approvals:
            self._approvals.discard(request_id)
            if self.ai_version >= APPROVAL_RESPONSES_SINCE and row.step in self._open_steps:
                approved = row.reply in ("once", "always")
                out += _frame(_ToolApprovalResponse(request_id, approved, str(row.reply)))
        return out

    def _step(self, step: Step[msgspec.Raw]) -> bytes:
        step_id = step.id
        out = b""
        if step_id not in self._open_steps or step.args is not None:
            args = _NULL if step.args is None else step.args
            out = _frame(_ToolInputAvailable(step_id, step.name, args, True))
        if step.status == "running":
            self._open_steps[step_id] = step.name
            return out
        self._open_steps.pop(step_id, None)
        if step.status == "succeeded":
            result = _NULL if step.result is None else step.result
            return out + _frame(_ToolOutputAvailable(step_id, result, True))
        return out + _frame(_ToolOutputError(step_id, step.error or "failed", True))

    def _terminal(self, terminal: Result | Error) -> bytes:
        out = [self._end_part(), self._close_open_steps(terminal), self._close_permissions()]
        if type(terminal) is Result and not self._was_streamed(terminal.message):
            out += [
                _frame(_TextStart(TEXT_PART_ID)),
                _frame(_TextDelta(TEXT_PART_ID, terminal.message)),
                _frame(_TextEnd(TEXT_PART_ID)),
            ]
        elif type(terminal) is Error:
            out.append(_frame(_Error(f"[{terminal.code}] {terminal.message}")))
        metadata = self._metadata() if self._usage.model_calls else None
        out += [_frame(_Finish(metadata)), DONE]
        self._finished = True
        return b"".join(out)

    def _was_streamed(self, message: str) -> bool:
        """True when the text deltas, concatenated, were exactly ``message``."""
        streamed = self._streamed
        return (
            streamed is not None and streamed.digest() == hashlib.sha256(message.encode()).digest()
        )

    def _close_permissions(self) -> bytes:
        """The ``data-permission`` part of each request still pending, closed as the
        stored message closes it."""
        return b"".join(
            _frame(_PermissionData(row.id, permission_block(row, ended=True)))
            for row in self._permissions.permissions.values()
            if row.status == "pending"
        )

    def _close_open_steps(self, terminal: Result | Error) -> bytes:
        """``tool-output-error`` for each step still running, with the reason the stored
        message gives it (its steps folded as :func:`assistant_message` folds them)."""
        if not self._open_steps:
            return b""
        turn = Turn(max_steps=len(self._open_steps), max_step_bytes=sys.maxsize)
        for step_id, name in self._open_steps.items():
            turn.fold_step(Step(id=step_id, name=name, status="running"), 0)
        turn.terminal = terminal
        self._open_steps.clear()
        blocks = assistant_message(turn, message_id="", created_at=0).content
        traces = next(b.steps for b in blocks if type(b) is StepTraceBlock)
        return b"".join(
            _frame(_ToolOutputError(trace.id, trace.error or "failed", True)) for trace in traces
        )


def _frame(chunk: _Chunk) -> bytes:
    """One ``data:`` frame (a raw payload may hold JSON whitespace line breaks)."""
    return format_event(_encode(chunk))
