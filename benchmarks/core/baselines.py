"""Other ways to do the core's job, for the benchmark to compare the façade against.

The job: NDJSON bytes in arbitrary chunks → SSE frames out (``id: <seq>``, ``event:``,
``data:``, logs filtered, a ``done`` frame after the terminal), every line validated
against the envelope, step rows folded by ``id``, a rejected line counted as a
diagnostic and not forwarded, exactly one terminal (``error{code:"upstream_closed"}``
synthesized at close if upstream sent none), and a bound on line size.

- :class:`NaiveProcessor`: the standard library as a competent engineer would use it —
  split on ``b"\\n"``, ``json`` decode, hand-written dict checks, dict rows, ``json``
  encode per frame, the frame formatted as ``str`` and encoded.
- :class:`PydanticProcessor`: pydantic v2 — a discriminated-union ``TypeAdapter``
  ``validate_json`` per line, the line model as the row, ``model_dump_json`` per frame.
- :class:`TypedDecodeCeiling` and :class:`UntypedDecodeCeiling`: line splitting plus
  msgspec decoding alone (typed with the core's own wire decoder, or untyped), with no
  fold and no output; no processor doing the whole job can beat these.

The two processors follow the façade's rules (the same frames, the same ``done``
payload, the same diagnostics for the same input) in the SSE chat mode only, and
without ``strict``. ``tests/benchmarks/test_baselines.py`` checks they agree.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal, Protocol

import msgspec
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from sandstream.core.envelope import new_wire_decoder

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "NaiveProcessor",
    "Processor",
    "PydanticProcessor",
    "TypedDecodeCeiling",
    "UntypedDecodeCeiling",
]

DEFAULT_MAX_LINE_BYTES: Final = 1 << 20
UPSTREAM_CLOSED_MESSAGE: Final = "upstream ended without a result or error"


class Processor(Protocol):
    """What the benchmark drives: bytes in, SSE bytes out."""

    def feed(self, data: bytes) -> bytes: ...

    def close(self) -> bytes: ...


class _LineBuffer:
    """Split chunks into lines; a line over ``max_line_bytes`` comes out as ``None``.

    The pending partial line is dropped (and the rest of that line skipped) as soon
    as it exceeds the bound, so memory stays bounded whatever the input.
    """

    __slots__ = ("_discarding", "_max", "_tail")

    def __init__(self, max_line_bytes: int) -> None:
        self._max = max_line_bytes
        self._tail = b""
        self._discarding = False

    def feed(self, data: bytes) -> list[bytes | None]:
        parts = (self._tail + data).split(b"\n")
        tail = parts.pop()
        limit = self._max
        lines: list[bytes | None] = []
        for line in parts:
            if line.endswith(b"\r"):
                line = line[:-1]
            lines.append(None if len(line) > limit else line)
        if self._discarding and lines:
            lines[0] = None  # the rest of the line already found too long
            self._discarding = False
        if self._discarding or len(tail) > limit + 1:  # +1: a "\r" before the "\n"
            self._discarding = True
            tail = b""
        self._tail = tail
        return lines

    def close(self) -> list[bytes | None]:
        tail, self._tail = self._tail, b""
        if self._discarding:
            self._discarding = False
            return [None]
        if tail.endswith(b"\r"):
            tail = tail[:-1]
        if not tail:
            return []
        return [None if len(tail) > self._max else tail]


def _skipped_line_problem(line: bytes | None, after_terminal: bool) -> str | None:
    """The diagnostic for a line the processors do not decode: one too long (``None``)
    or one after the terminal event; ``None`` for a blank line, skipped quietly."""
    if line is None:
        return "line too long"
    if line and after_terminal:
        return "line after the terminal event"
    return None


# -- naive: the standard library ------------------------------------------------------


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


# json.loads() is this same decoder's decode(); NaN and Infinity are not JSON.
_json_decode: Final = json.JSONDecoder(parse_constant=_reject_constant).decode
_json_encode: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

_LOG_LEVELS: Final = frozenset({"debug", "info", "warn", "error"})
_STEP_STATUSES: Final = frozenset({"running", "succeeded", "failed"})


def _check(obj: Any) -> str | None:
    """Return why ``obj`` is not a valid envelope line, or ``None`` if it is."""
    if type(obj) is not dict:
        return "a line must be a JSON object"
    kind = obj.get("type")
    ts = obj.get("ts")
    if ts is not None and type(ts) is not int:
        return "`ts` must be an integer"
    if kind == "step":
        for key in ("id", "name"):
            if type(obj.get(key)) is not str:
                return f"`{key}` must be a string"
        if obj.get("status") not in _STEP_STATUSES:
            return "`status` must be running, succeeded or failed"
        error = obj.get("error")
        if error is not None and type(error) is not str:
            return "`error` must be a string"
        duration = obj.get("durationMs")
        if duration is not None and type(duration) is not int and type(duration) is not float:
            return "`durationMs` must be a number"
        return None
    if kind == "log":
        if obj.get("level") not in _LOG_LEVELS:
            return "`level` must be debug, info, warn or error"
        if type(obj.get("message")) is not str:
            return "`message` must be a string"
        return None
    if kind == "result":
        return None if type(obj.get("message")) is str else "`message` must be a string"
    if kind == "error":
        strings = type(obj.get("code")) is str and type(obj.get("message")) is str
        return None if strings else "`code` and `message` must be strings"
    return f"unknown line type {kind!r}"


class NaiveProcessor:
    """The job done with ``json`` and dicts. Rows are dicts keyed by step id."""

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._lines = _LineBuffer(max_line_bytes)
        self.steps: dict[str, dict[str, Any]] = {}
        self.terminal: dict[str, Any] | None = None
        self.diagnostics: list[tuple[int, str]] = []
        self.lineno = 0
        self.seq = 0
        self._closed = False

    def feed(self, data: bytes) -> bytes:
        return self._process(self._lines.feed(data))

    def close(self) -> bytes:
        if self._closed:
            return b""
        self._closed = True
        out = self._process(self._lines.close())
        if self.terminal is None:
            error = {"type": "error", "code": "upstream_closed", "message": UPSTREAM_CLOSED_MESSAGE}
            self.terminal = error
            out += self._frame("error", error).encode() + self._done().encode()
        return out

    def _frame(self, event: str, obj: dict[str, Any]) -> str:
        self.seq += 1
        return f"id: {self.seq}\nevent: {event}\ndata: {_json_encode(obj)}\n\n"

    def _done(self) -> str:
        kind = self.terminal["type"] if self.terminal else "error"
        done = {"terminal": kind, "diagnostics": len(self.diagnostics)}
        return self._frame("done", done)

    def _process(self, lines: list[bytes | None]) -> bytes:
        out: list[str] = []
        steps = self.steps
        for line in lines:
            self.lineno += 1
            # too long (None), blank or after the terminal: not decoded
            if not line or self.terminal is not None or not line.strip():
                skipped = _skipped_line_problem(line, self.terminal is not None)
                if skipped is not None:
                    self.diagnostics.append((self.lineno, skipped))
                continue
            try:
                obj = _json_decode(line.decode())
            except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
                self.diagnostics.append((self.lineno, str(exc)))
                continue
            except RecursionError:
                self.diagnostics.append((self.lineno, "JSON nested too deeply"))
                continue
            problem = _check(obj)
            if problem is not None:
                self.diagnostics.append((self.lineno, problem))
                continue
            kind = obj["type"]
            if kind == "log":
                continue
            if kind == "step":
                step_id = obj["id"]
                row = steps.get(step_id)
                if row is None:
                    ts = obj.get("ts")
                    steps[step_id] = {
                        "id": step_id,
                        "name": obj["name"],
                        "status": obj["status"],
                        "args": obj.get("args"),
                        "result": obj.get("result"),
                        "error": obj.get("error"),
                        "durationMs": obj.get("durationMs"),
                        "firstTs": ts,
                        "lastTs": ts,
                    }
                else:
                    if row["status"] != "running" or row["name"] != obj["name"]:
                        problem = "already ended" if row["status"] != "running" else "renamed"
                        self.diagnostics.append((self.lineno, f"step {step_id!r} {problem}"))
                        continue
                    row["status"] = obj["status"]
                    for key in ("args", "result", "error", "durationMs"):
                        value = obj.get(key)
                        if value is not None:
                            row[key] = value
                    ts = obj.get("ts")
                    if ts is not None:
                        if row["firstTs"] is None:
                            row["firstTs"] = ts
                        row["lastTs"] = ts
                out.append(self._frame("step", obj))
            else:
                self.terminal = obj
                out.append(self._frame(kind, obj))
                out.append(self._done())
        return "".join(out).encode()


# -- pydantic v2 --------------------------------------------------------------------


class _Line(BaseModel):
    # strict: no coercion ("5" is not an int), as the envelope's rules require;
    # extra="allow": fields this version does not know are forwarded, not dropped.
    model_config = ConfigDict(strict=True, extra="allow")


class LogLine(_Line):
    type: Literal["log"]
    level: Literal["debug", "info", "warn", "error"]
    message: str
    ts: int | None = None


class StepLine(_Line):
    type: Literal["step"]
    id: str
    name: str
    status: Literal["running", "succeeded", "failed"]
    args: Any = None
    result: Any = None
    error: str | None = None
    duration_ms: int | float | None = Field(default=None, alias="durationMs")
    ts: int | None = None
    first_ts: int | None = Field(default=None, exclude=True)


class ResultLine(_Line):
    type: Literal["result"]
    message: str
    ts: int | None = None


class ErrorLine(_Line):
    type: Literal["error"]
    code: str
    message: str
    ts: int | None = None


EnvelopeLine = Annotated[LogLine | StepLine | ResultLine | ErrorLine, Field(discriminator="type")]
_envelope: Final = TypeAdapter[EnvelopeLine](EnvelopeLine)


class PydanticProcessor:
    """The job done with pydantic v2 models; the first line of a step is its row."""

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._lines = _LineBuffer(max_line_bytes)
        self.steps: dict[str, StepLine] = {}
        self.terminal: ResultLine | ErrorLine | None = None
        self.diagnostics: list[tuple[int, str]] = []
        self.lineno = 0
        self.seq = 0
        self._closed = False

    def feed(self, data: bytes) -> bytes:
        return self._process(self._lines.feed(data))

    def close(self) -> bytes:
        if self._closed:
            return b""
        self._closed = True
        out = self._process(self._lines.close())
        if self.terminal is None:
            error = ErrorLine(type="error", code="upstream_closed", message=UPSTREAM_CLOSED_MESSAGE)
            self.terminal = error
            out += (self._frame("error", error) + self._done()).encode()
        return out

    def _frame(self, event: str, line: BaseModel) -> str:
        self.seq += 1
        data = line.model_dump_json(by_alias=True, exclude_unset=True)
        return f"id: {self.seq}\nevent: {event}\ndata: {data}\n\n"

    def _done(self) -> str:
        self.seq += 1
        kind = self.terminal.type if self.terminal else "error"
        data = f'{{"terminal":"{kind}","diagnostics":{len(self.diagnostics)}}}'
        return f"id: {self.seq}\nevent: done\ndata: {data}\n\n"

    def _process(self, lines: list[bytes | None]) -> bytes:
        out: list[str] = []
        steps = self.steps
        validate = _envelope.validate_json
        for line in lines:
            self.lineno += 1
            # too long (None), blank or after the terminal: not decoded
            if not line or self.terminal is not None or not line.strip():
                skipped = _skipped_line_problem(line, self.terminal is not None)
                if skipped is not None:
                    self.diagnostics.append((self.lineno, skipped))
                continue
            try:
                envelope = validate(line)
            except ValidationError as exc:
                self.diagnostics.append((self.lineno, str(exc)))
                continue
            if isinstance(envelope, LogLine):
                continue
            if isinstance(envelope, StepLine):
                row = steps.get(envelope.id)
                if row is None:
                    envelope.first_ts = envelope.ts
                    steps[envelope.id] = envelope
                else:
                    if row.status != "running" or row.name != envelope.name:
                        problem = "already ended" if row.status != "running" else "renamed"
                        self.diagnostics.append((self.lineno, f"step {row.id!r} {problem}"))
                        continue
                    row.status = envelope.status
                    if envelope.args is not None:
                        row.args = envelope.args
                    if envelope.result is not None:
                        row.result = envelope.result
                    if envelope.error is not None:
                        row.error = envelope.error
                    if envelope.duration_ms is not None:
                        row.duration_ms = envelope.duration_ms
                    if envelope.ts is not None:
                        if row.first_ts is None:
                            row.first_ts = envelope.ts
                        row.ts = envelope.ts
                out.append(self._frame("step", envelope))
            else:
                self.terminal = envelope
                out.append(self._frame(envelope.type, envelope))
                out.append(self._done())
        return "".join(out).encode()


# -- ceilings: decoding alone ----------------------------------------------------------


class TypedDecodeCeiling:
    """Split lines and decode each with the core's typed wire decoder; nothing else."""

    def __init__(self) -> None:
        self._decode = new_wire_decoder().decode
        self._tail = b""
        self.rejected = 0

    def feed(self, data: bytes) -> bytes:
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        decode = self._decode
        for line in lines:
            try:
                decode(line)
            except msgspec.DecodeError:
                self.rejected += 1
        return b""

    def close(self) -> bytes:
        if self._tail:
            self.feed(b"\n")
        return b""


class UntypedDecodeCeiling:
    """Split lines and ``msgspec.json.decode`` each into Python objects; nothing else."""

    def __init__(self) -> None:
        self._tail = b""
        self.rejected = 0

    def feed(self, data: bytes) -> bytes:
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        decode = msgspec.json.decode
        for line in lines:
            try:
                decode(line)
            except msgspec.DecodeError:
                self.rejected += 1
        return b""

    def close(self) -> bytes:
        if self._tail:
            self.feed(b"\n")
        return b""
