"""The ``scripted`` agent: a deterministic plan from the config, run against real skills.

For offline use, demos, tests and benchmarks. In order it: emits the ``load`` lines
if any (benchmark mode), runs each planned step as a real skill call, then ends with
``error`` if set (as ``error{code, message}``), else returns ``message`` with
``{prompt}`` replaced by the turn's prompt. User messages received during the run
are taken (logged as ``user message: …``) before each step and before the end.
With ``stop_on_failure`` a failed step raises :class:`~..errors.AgentError`
(``step_failed``).

When the reader asked for the ``live`` extension, the ``reasoning`` and then the
message are streamed as ``delta`` lines (a word each) before the run ends, and a step with ``ask``
asks the user: the step ``running``, a ``permission`` line ``pending`` about it, then
the answer from the inbox (none within ``permission_timeout_sec``: ``reject``), then the
``permission`` line ``resolved``. ``once`` runs the step, ``always`` runs it and every
later asking step of the same tool, ``reject`` fails it. A request one of the chat's
grants matches (its tool kind is the tool's name, its title ``Run <tool>?``) is resolved
``always`` with ``by: "grant"`` at once, without waiting. Without the extension nobody
can answer: an asking step is rejected (and a ``warn`` logged).

Cancellation propagates at the next step, load batch or delta; a request still
pending is resolved ``cancelled`` first.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from sandstream.core import (
    Delta,
    DeltaKind,
    Envelope,
    LoadSpec,
    Log,
    Permission,
    PermissionOption,
    PermissionReply,
    ScriptedAgent,
    ScriptedStep,
    Step,
)

from ..context import RunContext
from ..errors import AgentError, OutputClosedError
from ..output import Emitter, new_step_id, now_ms

__all__ = [
    "PERMISSION_OPTIONS",
    "emit_load",
    "encode_load_lines",
    "load_lines",
    "run_scripted",
    "split_words",
]

_BATCH: Final = 256
_WORD: Final = re.compile(r"\s*\S+\s*|\s+")
PERMISSION_OPTIONS: Final = [
    PermissionOption(id="allow-once", kind="allow_once", name="Allow once"),
    PermissionOption(id="allow-always", kind="allow_always", name="Always allow"),
    PermissionOption(id="reject-once", kind="reject_once", name="Reject"),
]
"""What an asking step offers."""


def _payload(seq: int, size: int) -> str:
    """``size`` characters that start with the sequence number when it fits."""
    head = f"{seq} "
    if len(head) >= size:
        return "x" * size
    return head + "x" * (size - len(head))


def load_lines(start: int, count: int, spec: LoadSpec, ts: int) -> list[Envelope]:
    """Load lines ``start`` to ``start + count - 1`` as envelopes (the reference form)."""
    lines: list[Envelope] = []
    for seq in range(start, start + count):
        if spec.line_type == "step" and not (seq == spec.lines - 1 and seq % 2 == 0):
            step_id = f"load_{seq // 2}"
            if seq % 2 == 0:
                lines.append(
                    Step(id=step_id, name="load", status="running", args={"seq": seq // 2}, ts=ts)
                )
            else:
                lines.append(
                    Step(
                        id=step_id,
                        name="load",
                        status="succeeded",
                        result=_payload(seq // 2, spec.payload_bytes),
                        duration_ms=0,
                        ts=ts,
                    )
                )
        else:
            lines.append(Log(level="info", message=_payload(seq, spec.payload_bytes), ts=ts))
    return lines


def encode_load_lines(start: int, count: int, spec: LoadSpec, ts: int) -> bytes:
    """The same lines as :func:`load_lines`, encoded directly (byte-identical, faster).

    Payloads are ASCII digits, a space and ``x``, so no JSON escaping is ever needed.
    """
    parts: list[bytes] = []
    tail = b',"ts":%d}\n' % ts
    for seq in range(start, start + count):
        if spec.line_type == "step" and not (seq == spec.lines - 1 and seq % 2 == 0):
            n = seq // 2
            if seq % 2 == 0:
                parts.append(
                    b'{"type":"step","id":"load_%d","name":"load","status":"running",'
                    b'"args":{"seq":%d}' % (n, n)
                )
            else:
                parts.append(
                    b'{"type":"step","id":"load_%d","name":"load","status":"succeeded",'
                    b'"result":"%s","durationMs":0' % (n, _payload(n, spec.payload_bytes).encode())
                )
        else:
            parts.append(
                b'{"type":"log","level":"info","message":"%s"'
                % _payload(seq, spec.payload_bytes).encode()
            )
        parts.append(tail)
    return b"".join(parts)


async def emit_load(emitter: Emitter, spec: LoadSpec) -> None:
    """Emit ``spec.lines`` lines paced at ``spec.rate`` lines/s (0: unpaced).

    Lines are written in batches of whole lines (at most 256 per write); the lines of
    a batch share the ``ts`` of their write. Pacing is by schedule (line ``i`` is due
    at ``start + i / rate``), so a slow reader makes the stream catch up rather than
    drift.
    """
    start = trio.current_time()
    sent = 0
    while sent < spec.lines:
        if spec.rate > 0:
            due = min(spec.lines, int((trio.current_time() - start) * spec.rate) + 1)
            if due <= sent:
                await trio.sleep_until(start + sent / spec.rate)
                continue
            count = min(due - sent, _BATCH)
        else:
            count = min(spec.lines - sent, _BATCH)
        emitter.emit_encoded(encode_load_lines(sent, count, spec, now_ms()), count)
        sent += count
        await trio.lowlevel.checkpoint()


def split_words(text: str) -> list[str]:
    """``text`` in pieces of a word and the whitespace around it; they join to ``text``."""
    return _WORD.findall(text)


async def run_scripted(ctx: RunContext) -> str:
    """Run the plan; return the final message (or raise the scripted error)."""
    spec = ctx.config.agent
    assert isinstance(spec, ScriptedAgent)
    if spec.load is not None:
        await emit_load(ctx.emitter, spec.load)
    always: set[str] = set()
    for planned in spec.steps:
        if planned.delay_sec:
            await trio.sleep(planned.delay_sec)
        ctx.take_messages()
        args: Any = planned.args
        approval = None
        step_id = new_step_id()
        if planned.ask and planned.tool not in always:
            approval = _asker(ctx, spec, planned, step_id, always)
        outcome = await ctx.toolbox.call(planned.tool, args, step_id=step_id, approval=approval)
        if not outcome.ok and spec.stop_on_failure:
            raise AgentError(f"step {planned.tool} failed: {outcome.error}", code="step_failed")
    ctx.take_messages()
    if spec.error is not None:
        raise AgentError(spec.error.message, code=spec.error.code)
    message = spec.message.replace("{prompt}", ctx.prompt)
    if ctx.live:
        await _stream(ctx.emitter, "reasoning", spec.reasoning, spec.delta_delay_sec)
        await _stream(ctx.emitter, "text", message, spec.delta_delay_sec)
    return message


async def _stream(emitter: Emitter, kind: DeltaKind, text: str, delay: float) -> None:
    """``text`` as ``delta`` lines of one fresh message id, ``delay`` s apart."""
    message_id = f"{'msg' if kind == 'text' else 'rsn'}_{uuid.uuid4().hex[:16]}"
    for index, piece in enumerate(split_words(text)):
        if index and delay:
            await trio.sleep(delay)
        emitter.emit(Delta(id=message_id, kind=kind, text=piece))
        await trio.lowlevel.checkpoint()


def _asker(
    ctx: RunContext, spec: ScriptedAgent, planned: ScriptedStep, step_id: str, always: set[str]
) -> Callable[[], Awaitable[str | None]]:
    """The approval of an asking step (see the module docstring), awaited once the
    step is ``running``."""
    emitter = ctx.emitter
    if not ctx.live:
        reason = "rejected: nobody can answer (the reader did not ask for the live extension)"
        emitter.log("warn", f"step {planned.tool}: {reason}")

        async def refuse() -> str:
            return reason

        return refuse
    request_id = f"perm_{uuid.uuid4().hex[:16]}"
    timeout = spec.permission_timeout_sec

    title = f"Run {planned.tool}?"

    async def ask() -> str | None:
        emitter.emit(
            Permission(
                id=request_id,
                status="pending",
                step=step_id,
                title=title,
                tool_kind=planned.tool,
                options=PERMISSION_OPTIONS,
            )
        )
        if ctx.granted(planned.tool, title):
            emitter.emit(Permission(id=request_id, status="resolved", reply="always", by="grant"))
            always.add(planned.tool)
            return None
        reply: PermissionReply = "cancelled"
        try:
            with trio.move_on_after(timeout) as timer:
                reply = await ctx.inbox.ask(request_id)
            if timer.cancelled_caught:
                reply = "reject"
                emitter.log("warn", f"permission {request_id}: no answer in {timeout:g} s")
        finally:
            with contextlib.suppress(OutputClosedError):
                emitter.emit(Permission(id=request_id, status="resolved", reply=reply))
        if reply == "always":
            always.add(planned.tool)
        if reply in ("once", "always"):
            return None
        if timer.cancelled_caught:
            return f"rejected: no answer within {timeout:g} s"
        return "rejected by the user"

    return ask
