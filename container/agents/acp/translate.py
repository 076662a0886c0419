"""ACP ``session/update`` notifications translated into envelope lines (sans-IO).

Tool calls, keyed by ``toolCallId`` and built from whichever message names one first
(``tool_call``, ``tool_call_update`` or a permission request), become one step each:
``running`` (again whenever its ``rawInput`` changes), then ``succeeded`` or ``failed``
with its name (the tool ``kind``, else its title), ``args`` (``rawInput``) and
``result`` (the text of its ``content``, else ``rawOutput``), cut to
``max_result_chars`` and marked when longer. ``agent_message_chunk`` text becomes
``delta`` text and ``agent_thought_chunk`` text ``delta`` reasoning, with message ids
assigned here: a new one each time text or reasoning resumes after something else. The
turn's message is exactly the concatenation of the text deltas; when text resumes after
a tool call or reasoning, a ``"\\n\\n"`` delta separates it from the text before. Text
chunks starting with one of ``hidden_text`` are dropped. Plans and mode changes become
``debug`` logs; other updates are ignored. Without ``live`` no deltas are produced (the
message is still assembled). No I/O, no clock (``now`` comes from the caller).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    CurrentModeUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from sandstream.core import Delta, DeltaKind, LiveEnvelope, Log, Step

from ...output import new_step_id

__all__ = ["DEFAULT_MAX_RESULT_CHARS", "MESSAGE_SEPARATOR", "TRANSLATED", "Translator"]

DEFAULT_MAX_RESULT_CHARS: Final = 64 * 1024
MESSAGE_SEPARATOR: Final = "\n\n"
_UNNAMED: Final = "tool"
TRANSLATED: Final = frozenset(
    {
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "current_mode_update",
    }
)
"""The ``sessionUpdate`` kinds :meth:`Translator.update` turns into lines; the others
(usage, commands, session info, config options) it would ignore."""


@dataclass
class _ToolCall:
    step_id: str
    name: str
    kind: str
    args: Any
    started: int
    done: bool = False
    terminal_output: list[str] = field(default_factory=list)
    """Output an agent reports only in ``_meta.terminal_output`` (pi)."""


class Translator:
    """Translate one prompt turn's updates; :attr:`message` is the text so far."""

    def __init__(
        self,
        *,
        live: bool,
        hidden_text: Sequence[str] = (),
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
        step_ids: Callable[[], str] = new_step_id,
    ) -> None:
        self._live = live
        self._hidden = tuple(hidden_text)
        self._max_result = max_result_chars
        self._step_ids = step_ids
        self._calls: dict[str, _ToolCall] = {}
        self._segment: tuple[DeltaKind, str] | None = None
        self._prefix = f"msg_{uuid.uuid4().hex[:12]}_"
        self._counter = itertools.count(1)
        self._parts: list[str] = []

    @property
    def message(self) -> str:
        """The turn's text: every text delta so far, concatenated."""
        return "".join(self._parts)

    @property
    def tools_running(self) -> bool:
        """Whether a tool call has started and not ended."""
        return any(not call.done for call in self._calls.values())

    def update(self, update: Any, now: int) -> list[LiveEnvelope]:
        """The lines for one ``session/update`` (an ``acp.schema`` update model)."""
        if isinstance(update, AgentMessageChunk | AgentThoughtChunk):
            kind: DeltaKind = "text" if isinstance(update, AgentMessageChunk) else "reasoning"
            content = update.content
            if isinstance(content, TextContentBlock):
                return self._chunk(kind, content.text, now)
            return [Log(level="debug", message=f"agent sent {content.type} content", ts=now)]
        if isinstance(update, ToolCallStart | ToolCallProgress):
            return self.tool_call(update, now)[1]
        if isinstance(update, AgentPlanUpdate):
            plan = "; ".join(f"[{entry.status}] {entry.content}" for entry in update.entries)
            return [Log(level="debug", message=f"agent plan: {plan}", ts=now)]
        if isinstance(update, CurrentModeUpdate):
            return [Log(level="debug", message=f"agent mode: {update.current_mode_id}", ts=now)]
        return []

    def tool_call(
        self, call: ToolCallStart | ToolCallProgress | ToolCallUpdate, now: int
    ) -> tuple[str, list[LiveEnvelope]]:
        """The step of a tool call (created if new) and the lines its news give."""
        self._segment = None
        out: list[LiveEnvelope] = []
        known = self._calls.get(call.tool_call_id)
        if known is None:
            kind = call.kind or "other"
            known = _ToolCall(self._step_ids(), _name(call), kind, call.raw_input, now)
            self._calls[call.tool_call_id] = known
            out.append(Step(id=known.step_id, name=known.name, status="running", args=known.args))
        else:
            if call.kind is not None:
                known.kind = call.kind
            if call.raw_input is not None and call.raw_input != known.args and not known.done:
                known.args = call.raw_input
                out.append(
                    Step(id=known.step_id, name=known.name, status="running", args=known.args)
                )
        output = _terminal_output(call)
        if output and not known.done:
            known.terminal_output.append(output)
        if known.done or call.status not in ("completed", "failed"):
            return known.step_id, out
        known.done = True
        result = self._result(call, known)
        duration = max(0, now - known.started)
        if call.status == "completed":
            step: Step[Any] = Step(
                id=known.step_id,
                name=known.name,
                status="succeeded",
                args=known.args,
                result=result,
                duration_ms=duration,
            )
        else:
            error = result if isinstance(result, str) else msgspec.json.encode(result).decode()
            step = Step(
                id=known.step_id,
                name=known.name,
                status="failed",
                args=known.args,
                error=error or "the tool failed",
                duration_ms=duration,
            )
        out.append(step)
        return known.step_id, out

    def tool_kind(self, tool_call_id: str) -> str:
        """The kind of a tool call :meth:`tool_call` has seen (``other`` when the agent
        never said)."""
        return self._calls[tool_call_id].kind

    def finish(self, why: str) -> list[LiveEnvelope]:
        """End of the turn: fail each step still running, with ``why`` as its error."""
        out: list[LiveEnvelope] = []
        for call in self._calls.values():
            if not call.done:
                call.done = True
                out.append(Step(id=call.step_id, name=call.name, status="failed", error=why))
        return out

    def _chunk(self, kind: DeltaKind, text: str, now: int) -> list[LiveEnvelope]:
        if not text or (kind == "text" and text.lstrip().startswith(self._hidden)):
            return []
        out: list[LiveEnvelope] = []
        if self._segment is None or self._segment[0] != kind:
            self._segment = (kind, f"{self._prefix}{next(self._counter)}")
            if kind == "text" and self._parts:
                self._parts.append(MESSAGE_SEPARATOR)
                out.append(Delta(id=self._segment[1], kind="text", text=MESSAGE_SEPARATOR, ts=now))
        if kind == "text":
            self._parts.append(text)
        out.append(Delta(id=self._segment[1], kind=kind, text=text, ts=now))
        return out if self._live else []

    def _result(
        self, call: ToolCallStart | ToolCallProgress | ToolCallUpdate, known: _ToolCall
    ) -> Any:
        texts = [
            item.content.text
            for item in call.content or ()
            if item.type == "content" and isinstance(item.content, TextContentBlock)
        ]
        result: Any = "\n".join(texts) if texts else call.raw_output
        if result is None and known.terminal_output:
            result = "".join(known.terminal_output)
        if isinstance(result, str):
            return _cut(result, self._max_result)
        if result is not None:
            encoded = msgspec.json.encode(result).decode()
            if len(encoded) > self._max_result:
                return _cut(encoded, self._max_result)
        return result


def _terminal_output(call: ToolCallStart | ToolCallProgress | ToolCallUpdate) -> str:
    meta = call.field_meta or {}
    output = meta.get("terminal_output")
    data = output.get("data") if isinstance(output, dict) else None
    return data if isinstance(data, str) else ""


def _name(call: ToolCallStart | ToolCallProgress | ToolCallUpdate) -> str:
    if call.kind is not None and call.kind != "other":
        return call.kind
    return call.title or _UNNAMED


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [truncated: {len(text) - limit} more characters]"
