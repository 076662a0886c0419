"""Tool calls as ``step`` lines: the bridge between an agent loop and the skills.

:meth:`Toolbox.call` emits ``step{status:"running", args}``, runs the skill, then
emits ``step{status:"succeeded", result}`` or ``step{status:"failed", error}`` with
``durationMs``, and returns the outcome for the agent to feed back to its model.
Bad input (unknown tool, unparseable or invalid arguments) is a failed step, never an
exception. A call may be gated (``approval``, awaited once the step is running): a
refusal fails the step with its reason and the skill never runs. If the call is
cancelled, a failed step (``error: "cancelled"``) closes the row before
:class:`trio.Cancelled` propagates, so no step is left running (any other exception
closes it too, as ``interrupted``, and propagates).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from sandstream.core import Step

from .errors import OutputClosedError
from .output import Emitter, new_step_id
from .skills import SkillOutcome, SkillRegistry, SkillRunner

__all__ = ["Toolbox"]


class Toolbox:
    """The skills offered to an agent, run as steps on the run's emitter."""

    def __init__(self, runner: SkillRunner, emitter: Emitter) -> None:
        self.runner = runner
        self.emitter = emitter

    @property
    def registry(self) -> SkillRegistry:
        return self.runner.registry

    def openai_tools(self) -> list[dict[str, Any]]:
        """The skills as Chat Completions ``tools`` entries."""
        return [skill.as_openai_tool() for skill in self.registry]

    async def call(
        self,
        name: str,
        args: Any,
        *,
        args_error: str | None = None,
        step_id: str | None = None,
        approval: Callable[[], Awaitable[str | None]] | None = None,
    ) -> SkillOutcome:
        """Run tool ``name`` with ``args`` as one step; return its outcome.

        ``args_error`` marks arguments that could not be parsed (``args`` then holds
        the raw text): the step fails at once with that message. ``step_id``: the
        step's id (default: a fresh one). ``approval`` is awaited once the step is
        running: ``None`` lets the skill run, a string fails the step with it.
        """
        step_id = step_id or new_step_id()
        self.emitter.emit(Step(id=step_id, name=name, status="running", args=args))
        started = trio.current_time()
        try:
            refused = None if approval is None else await approval()
            if args_error is not None:
                outcome = SkillOutcome.failure(args_error)
            elif refused is not None:
                outcome = SkillOutcome.failure(refused)
            else:
                outcome = await self.runner.run(name, args)
        except BaseException as exc:
            # Close the row whatever stops the call: cancellation (a signal, the
            # runtime cap) arrives as Cancelled, possibly wrapped in a group.
            reason = "cancelled" if _is_cancellation(exc) else f"interrupted: {exc!r}"
            with contextlib.suppress(OutputClosedError):
                self._finish(step_id, name, SkillOutcome.failure(reason), started)
            raise
        self._finish(step_id, name, outcome, started)
        return outcome

    def _finish(self, step_id: str, name: str, outcome: SkillOutcome, started: float) -> None:
        duration_ms = round((trio.current_time() - started) * 1000)
        if outcome.ok:
            step: Step[Any] = Step(
                id=step_id,
                name=name,
                status="succeeded",
                result=outcome.result,
                duration_ms=duration_ms,
            )
        else:
            step = Step(
                id=step_id,
                name=name,
                status="failed",
                error=outcome.error or "failed",
                duration_ms=duration_ms,
            )
        self.emitter.emit(step)


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_cancellation(inner) for inner in exc.exceptions)
    return isinstance(exc, trio.Cancelled)
