"""The folded state of one turn: step rows, the terminal event, diagnostics, (with
the ``live`` extension) message parts and permission requests (:mod:`.live`), and
(with the ``usage`` extension) the tokens of the turn's model calls.

A :class:`Turn` is built by :class:`~sandstream.core.processor.StreamProcessor` as
lines arrive; embedders read it. It never raises on bad input: a line that breaks a
rule is returned from the fold as a :class:`Diagnostic` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

import msgspec

from .envelope import Delta, Error, ModelUsage, Permission, Result, Step, StepStatus
from .live import (
    DEFAULT_MAX_PERMISSIONS,
    DEFAULT_MAX_TEXT_CHARS,
    LiveDiagnosticCode,
    LiveFold,
    MessagePart,
    PermissionRow,
)
from .model_usage import Usage

__all__ = [
    "DEFAULT_MAX_PERMISSIONS",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MAX_STEP_BYTES",
    "DEFAULT_MAX_TEXT_CHARS",
    "Diagnostic",
    "DiagnosticCode",
    "MessagePart",
    "PermissionRow",
    "StepRow",
    "Turn",
    "decode_payload",
]

DiagnosticCode: TypeAlias = (
    Literal[
        "line_too_long",
        "invalid_json",
        "invalid_utf8",
        "invalid_line",
        "step_already_ended",
        "step_renamed",
        "after_terminal",
    ]
    | LiveDiagnosticCode
)

DEFAULT_MAX_DIAGNOSTICS: Final = 1000
DEFAULT_MAX_STEPS: Final = 2000
"""Step rows a turn keeps; later steps are counted, not kept."""
DEFAULT_MAX_STEP_BYTES: Final = 4 * 1024 * 1024
"""Bytes of step lines a turn keeps in its rows; beyond them payloads are counted only."""
_KEPT_ERROR_CHARS: Final = 200
_TRACKED_OMITTED: Final = 4096
"""Omitted steps running at once whose ids (hashes) are remembered, to count each once."""


class Diagnostic(msgspec.Struct, frozen=True, gc=False):
    """Why line ``line`` (1-based, counting every physical line) was rejected."""

    line: int
    code: DiagnosticCode
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.code}: {self.reason}"


class StepRow(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """One step of the agent loop, folded from every line carrying its ``id``.

    Each field holds the latest value any of those lines gave it. ``args`` and
    ``result`` hold the raw JSON the producer sent (``None`` when absent), copied
    out of the line so a turn's state never pins whole lines in memory;
    :func:`decode_payload` turns them into Python values.
    """

    id: str
    name: str
    status: StepStatus
    args: msgspec.Raw | None = None
    result: msgspec.Raw | None = None
    error: str | None = None
    duration_ms: int | float | None = None
    first_ts: int | None = None
    last_ts: int | None = None
    omitted_bytes: int = 0
    """Bytes of this step's later lines whose payloads were not kept (byte bound)."""


def decode_payload(raw: msgspec.Raw | None) -> Any:
    """Decode a step's raw ``args``/``result`` JSON (``None`` stays ``None``)."""
    return None if raw is None else msgspec.json.decode(raw)


class Turn:
    """Step rows in first-seen order, the terminal event, and the diagnostics.

    At most ``max_diagnostics`` diagnostics are kept; ``diagnostic_count`` counts
    them all, so memory stays bounded on an endless stream of bad lines.

    Steps are bounded the same way. At most ``max_steps`` rows are kept, holding at
    most ``max_step_bytes`` of step lines between them. A step first seen beyond
    either bound is *omitted*: counted in ``omitted_steps`` (its lines' bytes in
    ``omitted_bytes``), not kept, and its lines are checked one by one only (the rule
    that nothing follows a step's terminal status needs the row). A kept row whose
    later line would pass the byte bound takes that line's status, duration and
    times, but not its ``args``/``result`` (counted in the row's ``omitted_bytes``)
    and only the first 200 characters of its ``error``. Omitted steps are counted
    exactly when each one's ``running`` line comes before its terminal line and no
    more than 4096 of them run at once (their ids are tracked by hash).

    ``live`` folds the ``live`` extension's lines, within its own bounds
    (``max_text_chars``, ``max_permissions``: :class:`~.live.LiveFold`); ``usage``
    sums the ``usage`` extension's lines, ``model_calls`` counts them.
    """

    __slots__ = (
        "_omitted_running",
        "_rows",
        "diagnostic_count",
        "diagnostics",
        "lines",
        "live",
        "logs",
        "max_diagnostics",
        "max_step_bytes",
        "max_steps",
        "model_calls",
        "omitted_bytes",
        "omitted_steps",
        "step_bytes",
        "synthesized",
        "terminal",
        "terminal_line",
        "usage",
    )

    def __init__(
        self,
        max_diagnostics: int = DEFAULT_MAX_DIAGNOSTICS,
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_step_bytes: int = DEFAULT_MAX_STEP_BYTES,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        max_permissions: int = DEFAULT_MAX_PERMISSIONS,
    ) -> None:
        if max_steps < 0 or max_step_bytes < 0:
            raise ValueError("max_steps and max_step_bytes must be >= 0")
        self.live = LiveFold(max_text_chars=max_text_chars, max_permissions=max_permissions)
        self._rows: dict[str, StepRow] = {}
        self.max_steps = max_steps
        self.max_step_bytes = max_step_bytes
        self.step_bytes = 0
        """Bytes of the step lines kept in the rows."""
        self.omitted_steps = 0
        """Steps first seen beyond ``max_steps`` or ``max_step_bytes``: not kept."""
        self.omitted_bytes = 0
        """Bytes of the omitted steps' lines."""
        self._omitted_running: set[int] = set()
        self.terminal: Result | Error | None = None
        self.terminal_line = 0
        self.synthesized = False
        """True when the terminal was made by sandstream, not sent upstream."""
        self.diagnostics: list[Diagnostic] = []
        self.diagnostic_count = 0
        self.max_diagnostics = max_diagnostics
        self.lines = 0
        """Physical lines seen, blank and rejected ones included."""
        self.logs = 0
        """Valid ``log`` lines seen."""
        self.usage = Usage()
        """The tokens of the turn's model calls so far: every ``usage`` line summed."""
        self.model_calls = 0
        """The model calls of the turn so far: ``usage`` lines folded."""

    @property
    def steps(self) -> list[StepRow]:
        """The step rows, in the order their ids were first seen (live objects)."""
        return list(self._rows.values())

    def step(self, step_id: str) -> StepRow | None:
        """The row of step ``step_id``, or ``None`` if no line carried that id."""
        return self._rows.get(step_id)

    @property
    def parts(self) -> list[MessagePart]:
        """The ``delta`` lines' message parts, in arrival order (``live`` extension)."""
        return self.live.parts

    @property
    def text(self) -> str:
        """Every ``text`` delta of the turn, all messages in order, concatenated (up to
        ``max_text_chars``): the ``result`` message, when the producer keeps the rule."""
        return self.live.text("text")

    @property
    def reasoning(self) -> str:
        """Every ``reasoning`` delta of the turn, concatenated, as :attr:`text`."""
        return self.live.text("reasoning")

    @property
    def permissions(self) -> Mapping[str, PermissionRow]:
        """The permission requests by id, in the order they were asked."""
        return self.live.permissions

    @property
    def result(self) -> Result | None:
        return self.terminal if type(self.terminal) is Result else None

    @property
    def error(self) -> Error | None:
        return self.terminal if type(self.terminal) is Error else None

    @property
    def ended(self) -> bool:
        return self.terminal is not None

    def fold_step(self, step: Step[msgspec.Raw], line: int, size: int = 0) -> Diagnostic | None:
        """Apply one step line of ``size`` bytes; return the violation instead if it
        breaks a rule. Beyond the bounds the step is counted instead (class docstring)."""
        row = self._rows.get(step.id)
        if row is None:
            if len(self._rows) >= self.max_steps or self.step_bytes + size > self.max_step_bytes:
                self._omit(step, size)
                return None
            self.step_bytes += size
            self._rows[step.id] = StepRow(
                step.id,
                step.name,
                step.status,
                None if step.args is None else step.args.copy(),
                None if step.result is None else step.result.copy(),
                step.error,
                step.duration_ms,
                step.ts,
                step.ts,
            )
            return None
        if row.status != "running":
            return Diagnostic(line, "step_already_ended", f"step {step.id!r} already {row.status}")
        if step.name != row.name:
            return Diagnostic(
                line, "step_renamed", f"step {step.id!r} is {row.name!r}, not {step.name!r}"
            )
        row.status = step.status
        if self.step_bytes + size <= self.max_step_bytes:
            self.step_bytes += size
            if step.args is not None:
                row.args = step.args.copy()
            if step.result is not None:
                row.result = step.result.copy()
            if step.error is not None:
                row.error = step.error
        else:
            row.omitted_bytes += size
            if step.error is not None:
                row.error = step.error[:_KEPT_ERROR_CHARS]
        if step.duration_ms is not None:
            row.duration_ms = step.duration_ms
        if step.ts is not None:
            if row.first_ts is None:
                row.first_ts = step.ts
            row.last_ts = step.ts
        return None

    def fold_delta(self, delta: Delta) -> None:
        """Apply one ``delta`` line (it breaks no rule a fold could see)."""
        self.live.fold_delta(delta)

    def fold_permission(self, permission: Permission, line: int) -> Diagnostic | None:
        """Apply one ``permission`` line; return the violation instead if it breaks a rule."""
        violation = self.live.fold_permission(permission)
        return None if violation is None else Diagnostic(line, *violation)

    def fold_usage(self, line: ModelUsage) -> None:
        """Add one model call's ``usage`` line to the turn's totals (it breaks no rule)."""
        self.usage += Usage(
            line.input_tokens, line.output_tokens, line.cached_input_tokens, line.cache_write_tokens
        )
        self.model_calls += 1

    def _omit(self, step: Step[msgspec.Raw], size: int) -> None:
        """Count a line of a step that has no row (one step per running/terminal pair)."""
        self.omitted_bytes += size
        running = self._omitted_running
        key = hash(step.id)
        if step.status == "running":
            if key not in running:
                self.omitted_steps += 1
                if len(running) < _TRACKED_OMITTED:
                    running.add(key)
        elif key in running:
            running.discard(key)
        else:
            self.omitted_steps += 1

    def record(self, diagnostic: Diagnostic) -> None:
        """Count a diagnostic, keeping it if under the bound."""
        self.diagnostic_count += 1
        if len(self.diagnostics) < self.max_diagnostics:
            self.diagnostics.append(diagnostic)
