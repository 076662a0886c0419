"""Claude Code ``stream-json`` output translated into sandstream envelope lines.

Input: the stdout of ``claude -p --output-format stream-json --verbose``, in any chunking.
Tool calls become steps, text and other lines ``log`` lines, the ``result`` line the
terminal (the mapping: docs/protocol.md, ``{"kind": "claude-code"}``). There is no clock:
``ts`` and ``durationMs`` come from the ``now_ms`` the caller passes.

Bad input never raises: a malformed or unknown line becomes a ``log`` warn. A line over
``max_line_bytes`` (a tool's huge output) has its strings cut to ``keep_string_bytes``
each and marked (:mod:`.long_lines`), with a ``log`` warn: its step keeps its outcome and
its result is the cut text; only a line still over the bound after that is skipped.
Lines after ``result`` are dropped; without one the core's ``StreamProcessor`` ends the
stream (``error{code:"upstream_closed"}``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ..envelope import Envelope, Error, Log, LogLevel, Result, Step
from ..errors import JSONInputError
from ..json_input import decode_json
from ..splitter import DEFAULT_MAX_LINE_BYTES
from .long_lines import LongLineSplitter, ShortenedLine

__all__ = [
    "API_ERROR_CODES",
    "DEFAULT_EXCERPT_CHARS",
    "DEFAULT_KEEP_STRING_BYTES",
    "DEFAULT_MAX_TRACKED_STEPS",
    "ERROR_CODES",
    "PERMISSION_DENIED",
    "UNKNOWN_TOOL_NAME",
    "ClaudeCodeTranslator",
]

DEFAULT_EXCERPT_CHARS: Final = 200
DEFAULT_KEEP_STRING_BYTES: Final = 128 * 1024
"""How much of each string an over-long line keeps."""
DEFAULT_MAX_TRACKED_STEPS: Final = 10_000
UNKNOWN_TOOL_NAME: Final = "unknown"
PERMISSION_DENIED: Final = "permission denied"
"""How the ``error`` of a step Claude Code did not execute begins."""

ERROR_CODES: Final[dict[str, str]] = {
    "error_max_turns": "max_turns",
    "error_max_budget_usd": "max_budget",
    "error_max_structured_output_retries": "max_structured_output_retries",
}
"""``error.code`` per ``result`` subtype."""

API_ERROR_CODES: Final[dict[str, str]] = {
    "authentication_failed": "authentication_failed",
    "oauth_org_not_allowed": "authentication_failed",
    "billing_error": "billing_error",
    "rate_limit": "rate_limited",
}
"""``error.code`` per API error of the assistant line (or HTTP status of the result:
401/403 ``authentication_failed``, 429 ``rate_limited``); any other failure is
``agent_error``."""

_SOURCE: Final = "claude-code"
_INTERNAL_PREFIX: Final = "[ede_diagnostic]"
_STATUS_CODES: Final[dict[int, str]] = {
    401: "authentication_failed",
    403: "authentication_failed",
    429: "rate_limited",
}
_QUIET_KEYS: Final = frozenset({"type", "subtype", "uuid", "session_id"})
_DETAIL_FIELDS: Final = 24
_LEVELS: Final[dict[str, LogLevel]] = {
    "api_retry": "warn",
    "permission_denied": "warn",
    "compact_boundary": "info",
}


class ClaudeCodeTranslator:
    """Translate one Claude Code run; not thread-safe.

    ``max_line_bytes`` bounds a line (longer ones have their strings cut to
    ``keep_string_bytes``), so memory between feeds stays bounded; at most
    ``max_tracked_steps`` tool-call ids are remembered (the oldest are forgotten first).
    """

    __slots__ = (
        "_api_error",
        "_denied",
        "_excerpt_chars",
        "_finished",
        "_line_no",
        "_max_tracked",
        "_running",
        "_seen",
        "_session_id",
        "_skipped",
        "_splitter",
        "lines_after_result",
    )

    def __init__(
        self,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        *,
        excerpt_chars: int = DEFAULT_EXCERPT_CHARS,
        keep_string_bytes: int = DEFAULT_KEEP_STRING_BYTES,
        max_tracked_steps: int = DEFAULT_MAX_TRACKED_STEPS,
    ) -> None:
        """Raise ``ValueError`` if a bound is not positive (or strings keep the whole line)."""
        if excerpt_chars < 1 or max_tracked_steps < 1:
            raise ValueError("excerpt_chars and max_tracked_steps must be positive")
        self._splitter = LongLineSplitter(
            max_line_bytes, min(keep_string_bytes, max(1, max_line_bytes // 2))
        )
        self._excerpt_chars = excerpt_chars
        self._max_tracked = max_tracked_steps
        self._line_no = 0
        # tool_use id -> (name, ts of the running step); insertion-ordered.
        self._running: dict[str, tuple[str, int | None]] = {}
        # tool_use ids already seen (running or ended), an insertion-ordered set.
        self._seen: dict[str, None] = {}
        # tool_use id -> why Claude Code did not execute it (system/permission_denied).
        self._denied: dict[str, str] = {}
        self._api_error: tuple[str, str] | None = None  # (code, text) of an API error
        self._session_id: str | None = None
        self._skipped = 0
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

        Without a ``result`` line, fails the steps still running (no terminal).
        """
        out: list[Envelope] = []
        for line in self._splitter.close():
            self._line(line, now_ms, out)
        if not self._finished:
            self._fail_running(now_ms, out, {})
        return out

    # --- one line -----------------------------------------------------------------

    def _line(self, line: bytes | None, ts: int | None, out: list[Envelope]) -> None:
        self._line_no += 1
        if self._finished:
            self.lines_after_result += 1
            return
        if line is None:
            self._skipped += 1
            limit = self._splitter.max_line_bytes
            self._warn(out, ts, f"line longer than {limit} bytes, skipped")
            return
        if isinstance(line, ShortenedLine):
            limit = self._splitter.max_line_bytes
            cut = f"line longer than {limit} bytes: {line.cut} bytes of its strings cut"
            self._warn(out, ts, cut)
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
        elif kind == "rate_limit_event":
            self._rate_limit(obj, ts, out)
        elif kind in ("control_request", "control_response", "control_cancel_request"):
            self._control(obj, kind, ts, out)
        elif kind != "stream_event":
            self._warn(out, ts, f"unrecognized line type {kind!r}: {self._excerpt(line)}")

    def _system(self, obj: dict[str, Any], ts: int | None, out: list[Envelope]) -> None:
        subtype = obj.get("subtype")
        if subtype == "init":
            self._init(obj, ts, out)
            return
        level = _LEVELS.get(subtype, "debug") if isinstance(subtype, str) else "debug"
        if subtype == "hook_response" and (
            obj.get("outcome") not in (None, "success") or obj.get("exit_code") not in (None, 0)
        ):
            level = "warn"
        elif subtype == "permission_denied":
            step_id = obj.get("tool_use_id")
            if isinstance(step_id, str) and step_id:
                self._denied[step_id] = "permission-denied"
                if len(self._denied) > self._max_tracked:
                    del self._denied[next(iter(self._denied))]
        details = self._details(obj)
        message = f"{_SOURCE} system {subtype}" + (f": {details}" if details else "")
        out.append(Log(level=level, message=message, ts=ts))

    def _init(self, obj: dict[str, Any], ts: int | None, out: list[Envelope]) -> None:
        session = obj.get("session_id")
        if isinstance(session, str):
            self._session_id = session
        facts = []
        for key, label in (("model", "model "), ("claude_code_version", "Claude Code ")):
            value = obj.get(key)
            if isinstance(value, str) and value:
                facts.append(label + value)
        mode = obj.get("permissionMode")
        if isinstance(mode, str) and mode:
            facts.append(f"permission mode {mode}")
        tools = obj.get("tools")
        if isinstance(tools, list):
            facts.append(f"{len(tools)} tools")
        servers = [s for s in _list(obj.get("mcp_servers")) if isinstance(s, dict)]
        if servers:
            facts.append(
                "MCP " + ", ".join(f"{s.get('name')} ({s.get('status')})" for s in servers)
            )
        detail = f" ({', '.join(facts)})" if facts else ""
        out.append(Log(level="info", message=f"{_SOURCE} session {session} started{detail}", ts=ts))
        for server in servers:
            if server.get("status") != "connected":
                message = f"{_SOURCE} MCP server {server.get('name')} is {server.get('status')}"
                out.append(Log(level="warn", message=message, ts=ts))

    def _rate_limit(self, obj: dict[str, Any], ts: int | None, out: list[Envelope]) -> None:
        info = obj.get("rate_limit_info")
        if not isinstance(info, dict):
            info = {}
        status = info.get("status")
        level: LogLevel = "warn" if isinstance(status, str) and status != "allowed" else "debug"
        message = f"{_SOURCE} rate limit: {self._details(info) or 'no details'}"
        out.append(Log(level=level, message=message, ts=ts))

    def _control(self, obj: dict[str, Any], kind: str, ts: int | None, out: list[Envelope]) -> None:
        request = obj.get("request")
        if isinstance(request, dict) and request.get("subtype") == "can_use_tool":
            what = self._details(request, skip=("input", "permission_suggestions"))
            message = (
                f"{_SOURCE} asks permission (request {obj.get('request_id')}): {what}; "
                "nothing here answers permission prompts"
            )
            out.append(Log(level="warn", message=message, ts=ts))
            return
        out.append(Log(level="debug", message=f"{_SOURCE} {kind}: {self._details(obj)}", ts=ts))

    def _assistant(
        self, obj: dict[str, Any], line: bytes, ts: int | None, out: list[Envelope]
    ) -> None:
        content = _content(obj)
        if content is None:
            self._warn(out, ts, f"assistant line without content: {self._excerpt(line)}")
            return
        api_error = obj.get("error")
        if not (isinstance(api_error, str) and api_error):
            api_error = None
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                text = block.get("text")
                if not (isinstance(text, str) and text.strip()):
                    continue
                if api_error is None:
                    out.append(Log(level="info", message=text, ts=ts))
                else:
                    self._api_error = (API_ERROR_CODES.get(api_error, "agent_error"), text)
                    message = f"{_SOURCE} API error {api_error}: {text}"
                    out.append(Log(level="warn", message=message, ts=ts))
            elif kind == "tool_use":
                self._tool_use(block, ts, out)
        if api_error is not None and self._api_error is None:
            self._api_error = (API_ERROR_CODES.get(api_error, "agent_error"), "")

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
        not_executed = _non_execution_kinds(obj.get("tool_result_meta"))
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                self._tool_result(block, not_executed, ts, out)

    def _tool_result(
        self,
        block: dict[str, Any],
        not_executed: dict[str, str],
        ts: int | None,
        out: list[Envelope],
    ) -> None:
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
        denial = not_executed.get(step_id) or self._denied.pop(step_id, None)
        if block.get("is_error") is True or denial is not None:
            error = _as_text(content) or "tool failed"
            if denial is not None:
                error = f"{PERMISSION_DENIED} ({denial}): {error}"
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
        errors = [e for e in _list(obj.get("errors")) if isinstance(e, str) and e.strip()]
        internal = [e for e in errors if e.startswith(_INTERNAL_PREFIX)]
        out.append(Log(level="info", message=_summary(obj, internal), ts=ts))
        denials = _denials(obj.get("permission_denials"))
        if denials:
            listed = ", ".join(f"{name} ({step_id})" for step_id, name in denials.items())
            message = f"{_SOURCE} permission denials: {listed}"
            out.append(Log(level="warn", message=message, ts=ts))
        self._fail_running(ts, out, denials)
        if subtype == "success" and not is_error:
            out.append(Result(message=text if isinstance(text, str) else "", ts=ts))
            return
        code = self._error_code(obj)
        shown = [e for e in errors if e not in internal]
        message = _error_message(obj, shown, self._api_error)
        out.append(Error(code=code, message=message, ts=ts))

    # --- helpers ------------------------------------------------------------------

    def _error_code(self, obj: dict[str, Any]) -> str:
        subtype = obj.get("subtype")
        if isinstance(subtype, str) and subtype in ERROR_CODES:
            return ERROR_CODES[subtype]
        if self._api_error is not None and self._api_error[0] != "agent_error":
            return self._api_error[0]
        status = obj.get("api_error_status")
        if isinstance(status, int) and status in _STATUS_CODES:
            return _STATUS_CODES[status]
        return "agent_error"

    def _fail_running(self, ts: int | None, out: list[Envelope], denials: dict[str, str]) -> None:
        """Close every step still running as failed: its ``tool_result`` never came."""
        missing = "Claude Code ended the turn without a result for this tool call"
        if self._skipped:
            limit = self._splitter.max_line_bytes
            missing += f" ({self._skipped} line(s) over {limit} bytes were skipped)"
        for step_id, (name, started_ts) in self._running.items():
            error = f"{PERMISSION_DENIED}: {missing}" if step_id in denials else missing
            duration = None
            if ts is not None and started_ts is not None:
                duration = max(0, ts - started_ts)
            out.append(
                Step(
                    id=step_id, name=name, status="failed", error=error, duration_ms=duration, ts=ts
                )
            )
        self._running.clear()

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

    def _details(self, obj: dict[str, Any], skip: tuple[str, ...] = ()) -> str:
        """A line's fields as ``key=value``, each value cut to ``excerpt_chars``."""
        parts: list[str] = []
        for key, value in obj.items():
            if key in _QUIET_KEYS or key in skip or value in (None, "", [], {}):
                continue
            if len(parts) == _DETAIL_FIELDS:
                parts.append("…")
                break
            text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
            if len(text) > self._excerpt_chars:
                text = text[: self._excerpt_chars] + "…"
            parts.append(f"{key}={text}")
        return ", ".join(parts)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _content(obj: dict[str, Any]) -> list[Any] | None:
    message = obj.get("message")
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, list):
            return content
    return None


def _non_execution_kinds(meta: Any) -> dict[str, str]:
    """``tool_use_id`` → ``non_execution_kind`` from a user line's ``tool_result_meta``."""
    kinds: dict[str, str] = {}
    for item in _list(meta):
        if isinstance(item, dict):
            step_id, kind = item.get("id"), item.get("non_execution_kind")
            if isinstance(step_id, str) and isinstance(kind, str) and kind:
                kinds[step_id] = kind
    return kinds


def _denials(value: Any) -> dict[str, str]:
    """``tool_use_id`` → tool name from a result line's ``permission_denials``."""
    denials: dict[str, str] = {}
    for item in _list(value):
        if isinstance(item, dict):
            step_id, name = item.get("tool_use_id"), item.get("tool_name")
            key = step_id if isinstance(step_id, str) and step_id else f"#{len(denials)}"
            denials[key] = name if isinstance(name, str) and name else "?"
    return denials


def _placeholder(block: dict[str, Any]) -> str | None:
    """``"[image image/png, 20480 bytes, omitted]"`` for a block with a base64 source."""
    source = block.get("source")
    if not (isinstance(source, dict) and isinstance(source.get("data"), str)):
        return None
    media_type = source.get("media_type")
    if not (isinstance(media_type, str) and media_type):
        media_type = "of unknown type"
    data: str = source["data"]
    size = len(data.rstrip("=")) * 3 // 4
    return f"[{block.get('type')} {media_type}, {size} bytes, omitted]"


def _block_value(block: Any) -> Any:
    if isinstance(block, dict):
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            return block["text"]
        placeholder = _placeholder(block)
        if placeholder is not None:
            return placeholder
    return block


def _as_result(content: Any) -> Any:
    """Text blocks become their text, base64 blocks a placeholder; all text → one string."""
    if isinstance(content, list):
        values = [_block_value(block) for block in content]
        if all(isinstance(value, str) for value in values):
            return "\n".join(values)
        return values
    return content


def _as_text(content: Any) -> str:
    result = _as_result(content)
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    return msgspec.json.encode(result).decode()


def _summary(obj: dict[str, Any], internal: list[str]) -> str:
    parts = [f"subtype={obj.get('subtype')}"]
    reason = obj.get("terminal_reason")
    if isinstance(reason, str) and reason:
        parts.append(f"terminal_reason={reason}")
    for key in ("num_turns", "duration_ms", "total_cost_usd"):
        value = obj.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            parts.append(f"{key}={value}")
    if internal:
        parts.append(f"diagnostics: {'; '.join(internal)}")
    return f"{_SOURCE} finished: {', '.join(parts)}"


def _error_message(
    obj: dict[str, Any], errors: list[str], api_error: tuple[str, str] | None
) -> str:
    """The user-visible message: the result text, the errors, the API error, or a default."""
    text = obj.get("result")
    if isinstance(text, str) and text.strip():
        return text
    if errors:
        return "; ".join(errors)
    if api_error is not None and api_error[1]:
        return api_error[1]
    subtype = obj.get("subtype")
    if subtype == "error_max_turns":
        turns = obj.get("num_turns")
        suffix = f" ({turns})" if isinstance(turns, int) else ""
        return f"Claude Code reached its maximum number of turns{suffix}"
    if subtype == "error_during_execution":
        reason = obj.get("terminal_reason")
        suffix = f" ({reason})" if isinstance(reason, str) and reason else ""
        return f"Claude Code stopped before finishing{suffix}"
    return f"Claude Code run failed ({subtype})"
