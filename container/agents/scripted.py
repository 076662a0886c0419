"""The ``scripted`` agent: a deterministic plan from the config, run against real skills.

For offline use, demos, tests and benchmarks. In order it: emits the ``load`` lines
if any (benchmark mode), runs each planned step as a real skill call, then ends with
``error`` if set (as ``error{code, message}``), else returns ``message`` with
``{prompt}`` replaced by the turn's prompt. User messages received during the run
are taken (logged as ``user message: …``) before each step and before the end.
With ``stop_on_failure`` a failed step raises :class:`~..errors.AgentError`
(``step_failed``). Cancellation propagates at the next step or load batch.
"""

from __future__ import annotations

from typing import Any, Final

import trio

from sandstream.core.envelope import Envelope, Log, Step
from sandstream.core.schemas import LoadSpec, ScriptedAgent

from ..context import RunContext
from ..errors import AgentError
from ..output import Emitter, now_ms

__all__ = ["emit_load", "encode_load_lines", "load_lines", "run_scripted"]

_BATCH: Final = 256


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


async def run_scripted(ctx: RunContext) -> str:
    """Run the plan; return the final message (or raise the scripted error)."""
    spec = ctx.config.agent
    assert isinstance(spec, ScriptedAgent)
    if spec.load is not None:
        await emit_load(ctx.emitter, spec.load)
    for planned in spec.steps:
        ctx.take_messages()
        args: Any = planned.args
        outcome = await ctx.toolbox.call(planned.tool, args)
        if not outcome.ok and spec.stop_on_failure:
            raise AgentError(f"step {planned.tool} failed: {outcome.error}", code="step_failed")
    ctx.take_messages()
    if spec.error is not None:
        raise AgentError(spec.error.message, code=spec.error.code)
    return spec.message.replace("{prompt}", ctx.prompt)
