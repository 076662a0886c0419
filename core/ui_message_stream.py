"""The chat's SSE turned into the Vercel AI SDK 5 UI message stream (``useChat``'s wire).

Sans-IO: feed it the chat stream's bytes (as :class:`~sandstream.core.StreamProcessor`
writes them) in any chunking; write out what it returns::

    stream = UIMessageStream(message_id="msg_1")
    out = stream.feed(chunk)   # bytes of UI message stream frames (maybe b"")
    out += stream.close()      # end of input: the stream is always finished

The chunks it makes: docs/chat.md, "AI SDK (useChat)". Bad input: a ``step``,
``result``, ``error`` or ``files`` frame whose data is not what the chat sends raises
:class:`UIMessageStreamError` (the stream accepts nothing more).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final

import msgspec

from .envelope import Error, Result, Step, WireEnvelope, new_wire_decoder
from .errors import SSEParseError, UIMessageStreamError
from .persistence import PersistedFileAttachment, StepTraceBlock, assistant_message
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
"""The id of the message's one text part (ids are per message)."""
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


class _Error(_Chunk, tag="error"):
    error_text: str


class _Finish(_Chunk, tag="finish"):
    pass


class _Files(msgspec.Struct):
    files: list[PersistedFileAttachment]


_encode: Final = msgspec.json.Encoder().encode
_decode_files: Final = msgspec.json.Decoder(_Files).decode
_decode_line: Final = new_wire_decoder().decode
_ENVELOPE_EVENTS: Final = frozenset({"step", "result", "error"})


class UIMessageStream:
    """Translate one turn's chat SSE into the UI message stream of ``message_id``.

    Not thread-safe. Memory: the SSE parser's bounds, plus the id and name of each
    step still running.
    """

    __slots__ = ("_file_url", "_finished", "_open_steps", "_parser", "_started", "message_id")

    def __init__(self, message_id: str, *, file_url: Callable[[str], str] | None = None) -> None:
        self.message_id = message_id
        self._file_url = file_url
        self._parser = SSEParser(include_comments=True)
        self._started = False
        self._finished = False
        self._open_steps: dict[str, str] = {}
        """Running steps: id → name."""

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
                if type(envelope) is Step:
                    out.append(self._step(envelope))
                else:
                    out.append(self._terminal(envelope))  # type: ignore[arg-type]
            elif item.event == "files" and self._file_url is not None:
                out.append(self._files(item.data, self._file_url))
        return b"".join(out)

    def _files(self, data: str, file_url: Callable[[str], str]) -> bytes:
        try:
            files = _decode_files(data.encode()).files
        except (msgspec.DecodeError, RecursionError) as exc:
            self._finished = True
            raise UIMessageStreamError(f"a 'files' frame's data is no file list: {exc}") from exc
        return b"".join(_frame(_File(file_url(f.id), f.content_type)) for f in files)

    def _envelope(self, event: str, data: str) -> WireEnvelope:
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
        out = [self._close_open_steps(terminal)]
        if type(terminal) is Result:
            out += [
                _frame(_TextStart(TEXT_PART_ID)),
                _frame(_TextDelta(TEXT_PART_ID, terminal.message)),
                _frame(_TextEnd(TEXT_PART_ID)),
            ]
        else:
            assert type(terminal) is Error
            out.append(_frame(_Error(f"[{terminal.code}] {terminal.message}")))
        out += [_frame(_Finish()), DONE]
        self._finished = True
        return b"".join(out)

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
