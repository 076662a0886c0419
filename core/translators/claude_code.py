"""Claude Code ``stream-json`` output translated into sandstream envelope lines.

Input is the stdout of ``claude -p --output-format stream-json --verbose``: one JSON
object per line, in any chunking. The mapping:

- ``system``/``init`` → ``log`` info naming the session, model and tool count;
  other ``system`` lines → ``log`` debug.
- ``assistant`` ``text`` blocks → ``log`` info (intermediate text is not the answer);
  ``tool_use`` blocks → ``step`` running (``id``, ``name``, ``args`` = ``input``).
- ``user`` ``tool_result`` blocks → ``step`` succeeded (``result`` = the content) or
  failed (``error`` = its text), with the running step's name and ``durationMs``.
- ``result`` → a ``log`` info summary, then ``result`` (subtype ``success`` and not
  ``is_error``) or ``error`` (code from the subtype, see :data:`ERROR_CODES`).
- ``stream_event`` partial lines, blank lines, thinking blocks → nothing.

Bad input never raises: a line that is not JSON, not an object, of an unknown
``type`` or malformed, or longer than ``max_line_bytes``, becomes a ``log`` warn with
its 1-based line number and a bounded excerpt. A ``tool_result`` whose
``tool_use_id`` was never seen running becomes a ``log`` warn plus a terminal step
named ``"unknown"`` (the core accepts a terminal step without a prior ``running``);
a second ``tool_use`` or ``tool_result`` for the same id is dropped with a warn.

Everything after the ``result`` line is dropped (counted in
:attr:`ClaudeCodeTranslator.lines_after_result`), so the terminal is the last line.
If the stream ends without a ``result`` line nothing is synthesized: the core's
:class:`~sandstream.core.processor.StreamProcessor` guarantees the terminal
(``error{code:"upstream_closed"}``). There is no clock here: ``ts`` and
``durationMs`` come only from the ``now_ms`` the caller passes.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ..envelope import Envelope, Error, Log, Result, Step
from ..json_input import JSONInputError, decode_json
from ..splitter import DEFAULT_MAX_LINE_BYTES, NDJSONSplitter

__all__ = [
    "DEFAULT_EXCERPT_CHARS",
    "DEFAULT_MAX_TRACKED_STEPS",
    "ERROR_CODES",
    "UNKNOWN_TOOL_NAME",
    "ClaudeCodeTranslator",
]

DEFAULT_EXCERPT_CHARS: Final = 200
DEFAULT_MAX_TRACKED_STEPS: Final = 10_000
UNKNOWN_TOOL_NAME: Final = "unknown"

ERROR_CODES: Final[dict[str, str]] = {
    "error_max_turns": "max_turns",
    "error_max_budget_usd": "max_budget",
    "error_max_structured_output_retries": "max_structured_output_retries",
    "error_during_execution": "agent_error",
}
"""``error.code`` per ``result`` subtype; any other failure is ``agent_error``."""

_SOURCE: Final = "claude-code"


class ClaudeCodeTranslator:
    """Translate one Claude Code run; not thread-safe.

    ``max_line_bytes`` bounds a line (longer ones are skipped with a warn), so memory
    between feeds stays bounded; at most ``max_tracked_steps`` tool-call ids are
    remembered (the oldest are forgotten first).
    """

    __slots__ = (
        "_excerpt_chars",
        "_finished",
        "_line_no",
        "_max_tracked",
        "_running",
        "_seen",
        "_session_id",
        "_splitter",
        "lines_after_result",
    )

    def __init__(
        self,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        *,
        excerpt_chars: int = DEFAULT_EXCERPT_CHARS,
        max_tracked_steps: int = DEFAULT_MAX_TRACKED_STEPS,
    ) -> None:
        """Raise ``ValueError`` if a bound is not positive."""
        if excerpt_chars < 1 or max_tracked_steps < 1:
            raise ValueError("excerpt_chars and max_tracked_steps must be positive")
        self._splitter = NDJSONSplitter(max_line_bytes)
        self._excerpt_chars = excerpt_chars
        self._max_tracked = max_tracked_steps
        self._line_no = 0
        # tool_use id -> (name, ts of the running step); insertion-ordered.
        self._running: dict[str, tuple[str, int | None]] = {}
        # tool_use ids already seen (running or ended), an insertion-ordered set.
        self._seen: dict[str, None] = {}
        self._session_id: str | None = None
        self._finished = False
        self.lines_after_result = 0

    @property
    def finished(self) -> bool:
        """True once the ``result`` line has been translated."""
        return self._finished

    @property
    def session_id(self) -> str | None:
        """Claude Code's session id, from the ``system``/``init`` line."""
        return self._session_id

    @property
    def running_step_ids(self) -> list[str]:
        """Ids of tool calls that started and have no result yet, oldest first."""
        return list(self._running)

    def feed(self, chunk: bytes, now_ms: int | None = None) -> list[Envelope]:
        """Return the envelopes for the lines completed by ``chunk``, stamped ``now_ms``.

        Raises :class:`~sandstream.core.splitter.SplitterClosedError` after :meth:`close`.
        """
        out: list[Envelope] = []
        for line in self._splitter.feed(chunk):
            self._line(line, now_ms, out)
        return out

    def close(self, now_ms: int | None = None) -> list[Envelope]:
        """End of output: translate a final line without ``\\n``. Idempotent.

        Synthesizes nothing for a missing ``result`` or for steps still running.
        """
        out: list[Envelope] = []
        for line in self._splitter.close():
            self._line(line, now_ms, out)
        return out

    # --- one line -----------------------------------------------------------------

    def _line(self, line: bytes | None, ts: int | None, out: list[Envelope]) -> None:
        self._line_no += 1
        if self._finished:
            self.lines_after_result += 1
            return
        if line is None:
            limit = self._splitter.max_line_bytes
            self._warn(out, ts, f"line longer than {limit} bytes, skipped")
            return
        if not line.strip():
            return
        try:
            obj = decode_json(line)
        except JSONInputError as exc:
            self._warn(out, ts, f"not JSON ({exc}): {self._excerpt(line)}")
            return
        if not isinstance(obj, dict):
            self._warn(out, ts, f"not a JSON object: {self._excerpt(line)}")
            return
        kind = obj.get("type")
        if kind == "assistant":
            self._assistant(obj, line, ts, out)
        elif kind == "user":
            self._user(obj, line, ts, out)
        elif kind == "system":
            self._system(obj, ts, out)
        elif kind == "result":
            self._result(obj, ts, out)
        elif kind != "stream_event":
            self._warn(out, ts, f"unrecognized line type {kind!r}: {self._excerpt(line)}")

    def _system(self, obj: dict[str, Any], ts: int | None, out: list[Envelope]) -> None:
        subtype = obj.get("subtype")
        if subtype != "init":
            out.append(Log(level="debug", message=f"{_SOURCE} system: {subtype}", ts=ts))
            return
        session = obj.get("session_id")
        if isinstance(session, str):
            self._session_id = session
        model = obj.get("model")
        tools = obj.get("tools")
        n_tools = len(tools) if isinstance(tools, list) else 0
        message = f"{_SOURCE} session {session} started (model {model}, {n_tools} tools)"
        out.append(Log(level="info", message=message, ts=ts))

    def _assistant(
        self, obj: dict[str, Any], line: bytes, ts: int | None, out: list[Envelope]
    ) -> None:
        content = _content(obj)
        if content is None:
            self._warn(out, ts, f"assistant line without content: {self._excerpt(line)}")
            return
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                text = block.get("text")
                if isinstance(text, str) and text.strip():
                    out.append(Log(level="info", message=text, ts=ts))
            elif kind == "tool_use":
                self._tool_use(block, ts, out)

    def _tool_use(self, block: dict[str, Any], ts: int | None, out: list[Envelope]) -> None:
        step_id, name = block.get("id"), block.get("name")
        if not (isinstance(step_id, str) and step_id and isinstance(name, str) and name):
            self._warn(out, ts, f"tool_use without a string id and name: id={step_id!r}")
            return
        if step_id in self._seen:
            self._warn(out, ts, f"duplicate tool_use {step_id!r} dropped")
            return
        self._remember(step_id)
        self._running[step_id] = (name, ts)
        if len(self._running) > self._max_tracked:
            del self._running[next(iter(self._running))]
        out.append(Step(id=step_id, name=name, status="running", args=block.get("input"), ts=ts))

    def _user(self, obj: dict[str, Any], line: bytes, ts: int | None, out: list[Envelope]) -> None:
        content = _content(obj)
        if content is None:
            message = obj.get("message")
            # A plain-string content is the echoed prompt: nothing to translate.
            if not (isinstance(message, dict) and isinstance(message.get("content"), str)):
                self._warn(out, ts, f"user line without content: {self._excerpt(line)}")
            return
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                self._tool_result(block, ts, out)

    def _tool_result(self, block: dict[str, Any], ts: int | None, out: list[Envelope]) -> None:
        step_id = block.get("tool_use_id")
        if not (isinstance(step_id, str) and step_id):
            self._warn(out, ts, f"tool_result without a string tool_use_id: {step_id!r}")
            return
        started = self._running.pop(step_id, None)
        if started is None:
            if step_id in self._seen:
                self._warn(out, ts, f"second tool_result for {step_id!r} dropped")
                return
            self._warn(out, ts, f"tool_result for unknown tool_use {step_id!r}")
            self._remember(step_id)
            name, started_ts = UNKNOWN_TOOL_NAME, None
        else:
            name, started_ts = started
        duration = None
        if ts is not None and started_ts is not None:
            duration = max(0, ts - started_ts)
        content = block.get("content")
        if block.get("is_error") is True:
            error = _as_text(content) or "tool failed"
            step: Step[Any] = Step(
                id=step_id, name=name, status="failed", error=error, duration_ms=duration, ts=ts
            )
        else:
            step = Step(
                id=step_id,
                name=name,
                status="succeeded",
                result=_as_result(content),
                duration_ms=duration,
                ts=ts,
            )
        out.append(step)

    def _result(self, obj: dict[str, Any], ts: int | None, out: list[Envelope]) -> None:
        self._finished = True
        subtype = obj.get("subtype")
        is_error = obj.get("is_error") is True
        text = obj.get("result")
        out.append(Log(level="info", message=_summary(obj), ts=ts))
        if subtype == "success" and not is_error:
            out.append(Result(message=text if isinstance(text, str) else "", ts=ts))
            return
        code = (
            ERROR_CODES.get(subtype, "agent_error") if isinstance(subtype, str) else "agent_error"
        )
        out.append(Error(code=code or "agent_error", message=_error_message(obj), ts=ts))

    # --- helpers ------------------------------------------------------------------

    def _remember(self, step_id: str) -> None:
        self._seen[step_id] = None
        if len(self._seen) > self._max_tracked:
            del self._seen[next(iter(self._seen))]

    def _warn(self, out: list[Envelope], ts: int | None, what: str) -> None:
        message = f"{_SOURCE} line {self._line_no}: {what}"
        out.append(Log(level="warn", message=message, ts=ts))

    def _excerpt(self, line: bytes) -> str:
        # Decode only a prefix: at most 4 bytes per character.
        text = line[: self._excerpt_chars * 4].decode("utf-8", errors="replace")
        if len(text) > self._excerpt_chars or len(line) > self._excerpt_chars * 4:
            return text[: self._excerpt_chars] + "…"
        return text


def _content(obj: dict[str, Any]) -> list[Any] | None:
    message = obj.get("message")
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, list):
            return content
    return None


def _text_blocks(content: list[Any]) -> list[str] | None:
    texts: list[str] = []
    for block in content:
        if not (isinstance(block, dict) and block.get("type") == "text"):
            return None
        text = block.get("text")
        if not isinstance(text, str):
            return None
        texts.append(text)
    return texts


def _as_result(content: Any) -> Any:
    """A string stays; a list of text blocks becomes their text; anything else as is."""
    if isinstance(content, list):
        texts = _text_blocks(content)
        if texts is not None:
            return "\n".join(texts)
    return content


def _as_text(content: Any) -> str:
    result = _as_result(content)
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    return msgspec.json.encode(result).decode()


def _summary(obj: dict[str, Any]) -> str:
    parts = [f"subtype={obj.get('subtype')}"]
    for key in ("num_turns", "duration_ms", "total_cost_usd"):
        value = obj.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            parts.append(f"{key}={value}")
    return f"{_SOURCE} finished: {', '.join(parts)}"


def _error_message(obj: dict[str, Any]) -> str:
    text = obj.get("result")
    if isinstance(text, str) and text.strip():
        return text
    errors = obj.get("errors")
    if isinstance(errors, list):
        joined = "; ".join(e for e in errors if isinstance(e, str) and e)
        if joined:
            return joined
    subtype = obj.get("subtype")
    if subtype == "error_max_turns":
        turns = obj.get("num_turns")
        suffix = f" ({turns})" if isinstance(turns, int) else ""
        return f"Claude Code reached its maximum number of turns{suffix}"
    return f"Claude Code run failed ({subtype})"
