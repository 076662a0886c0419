"""The ACP translation, fed messages recorded from real agents (tests/data/acp)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from acp.schema import RequestPermissionRequest, SessionNotification

from sandstream.container.agents.acp.translate import TRANSLATED, Translator
from sandstream.core.envelope import Delta, LiveEnvelope, Log, Step

DATA = Path(__file__).resolve().parent.parent / "data" / "acp"


def replay(name: str, *, live: bool = True, **kwargs: Any) -> tuple[Translator, list[LiveEnvelope]]:
    counter = itertools.count(1)
    translator = Translator(live=live, step_ids=lambda: f"step_{next(counter)}", **kwargs)
    out: list[LiveEnvelope] = []
    for number, line in enumerate((DATA / name).read_text().splitlines()):
        message = json.loads(line)
        if message.get("method") == "session/update":
            if message["params"]["update"]["sessionUpdate"] not in TRANSLATED:
                continue  # as the session does: e.g. claude's usage_update has "used": null
            update = SessionNotification.model_validate(message["params"]).update
            out += translator.update(update, now=1000 + number)
        elif message.get("request") == "session/request_permission":
            asked = RequestPermissionRequest.model_validate(message["params"])
            out += translator.tool_call(asked.tool_call, now=1000 + number)[1]
    return translator, out


def test_opencode_shell_step_and_text() -> None:
    translator, out = replay("opencode_permission_once.jsonl")
    steps = [e for e in out if isinstance(e, Step)]
    assert {s.id for s in steps} == {"step_1"}
    assert [s.status for s in steps][-1] == "succeeded"
    assert {s.status for s in steps[:-1]} == {"running"}
    assert steps[0].args == {"cwd": steps[0].args["cwd"]}  # rawInput grows in an update
    assert steps[1].args["command"] == "ls -la"
    assert steps[-1].name == "execute"
    assert steps[-1].args["command"] == "ls -la"
    assert "a.txt" in steps[-1].result
    deltas = [e for e in out if isinstance(e, Delta)]
    assert [d.text for d in deltas] == ["The command ", "ran ", "fine."]
    assert len({d.id for d in deltas}) == 1
    assert out.index(steps[-1]) < out.index(deltas[0])
    assert translator.message == "The command ran fine."


def test_claude_args_arrive_late_and_empty_chunks_are_dropped() -> None:
    translator, out = replay("claude_shell.jsonl")
    steps = [e for e in out if isinstance(e, Step)]
    assert [s.status for s in steps] == ["running", "running", "succeeded"]
    assert steps[0].args == {}
    assert steps[-1].args == {"command": "ls -la", "description": "Run the command"}
    assert "a.txt" in steps[-1].result
    texts = [e.text for e in out if isinstance(e, Delta)]
    assert "".join(texts) == translator.message == "The command ran fine."


def test_without_live_only_steps_and_the_message() -> None:
    translator, out = replay("opencode_permission_once.jsonl", live=False)
    assert not any(isinstance(e, Delta) for e in out)
    assert translator.message == "The command ran fine."


def _update(update_kind: str, **fields: Any) -> Any:
    params = {"sessionId": "s", "update": {"sessionUpdate": update_kind, **fields}}
    return SessionNotification.model_validate(params).update


def _text(kind: str, text: str) -> Any:
    return _update(kind, content={"type": "text", "text": text})


def test_message_ids_segments_separator_and_hidden_text() -> None:
    translator = Translator(live=True, hidden_text=("[MODE_UPDATE]",))
    out: list[LiveEnvelope] = []
    for update in [
        _text("agent_thought_chunk", "think"),
        _text("agent_message_chunk", "[MODE_UPDATE] default"),
        _text("agent_message_chunk", "First."),
        _update("tool_call", toolCallId="t1", title="Read", kind="read"),
        _update("tool_call_update", toolCallId="t1", status="failed", rawOutput={"e": "no"}),
        _text("agent_message_chunk", "Second."),
        _update("plan", entries=[{"content": "x", "priority": "high", "status": "pending"}]),
    ]:
        out += translator.update(update, now=5)
    deltas = [e for e in out if isinstance(e, Delta)]
    assert [(d.kind, d.text) for d in deltas] == [
        ("reasoning", "think"),
        ("text", "First."),
        ("text", "\n\n"),
        ("text", "Second."),
    ]
    ids = [d.id for d in deltas]
    assert ids[0] != ids[1] and ids[1] != ids[2] and ids[2] == ids[3]
    assert (
        translator.message
        == "First.\n\nSecond."
        == "".join(d.text for d in deltas if d.kind == "text")
    )
    failed = [e for e in out if isinstance(e, Step) and e.status == "failed"]
    assert failed[0].error == '{"e":"no"}'
    assert any(isinstance(e, Log) and e.message.startswith("agent plan: ") for e in out)


def test_a_huge_result_is_cut_and_marked_and_a_permission_creates_the_step() -> None:
    translator = Translator(live=True, max_result_chars=100)
    asked = RequestPermissionRequest.model_validate(
        {
            "sessionId": "s",
            "toolCall": {"toolCallId": "t9", "title": "rm -rf x", "kind": "execute"},
            "options": [{"optionId": "a", "name": "Allow", "kind": "allow_once"}],
        }
    )
    step_id, first = translator.tool_call(asked.tool_call, now=1)
    assert [(s.id, s.status) for s in first if isinstance(s, Step)] == [(step_id, "running")]
    done = translator.update(
        _update(
            "tool_call_update",
            toolCallId="t9",
            status="completed",
            content=[{"type": "content", "content": {"type": "text", "text": "y" * 1000}}],
        ),
        now=3,
    )
    [step] = done
    assert isinstance(step, Step) and step.id == step_id and step.status == "succeeded"
    assert step.result == "y" * 100 + "… [truncated: 900 more characters]"
    assert step.duration_ms == 2
    assert translator.finish("ended") == []


def test_output_reported_only_in_meta_becomes_the_result() -> None:
    """pi-acp sends a shell tool's output only in ``_meta.terminal_output``."""
    translator = Translator(live=True, step_ids=lambda: "step_1")
    updates = [
        {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "ls", "kind": "execute",
         "status": "pending", "content": [{"type": "terminal", "terminalId": "t1"}]},
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1",
         "_meta": {"terminal_output": {"data": "a.txt\n"}}},
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1",
         "_meta": {"terminal_output": {"data": "b.txt\n"}}},
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
         "_meta": {"terminal_exit": {"exit_code": 0, "signal": None}}},
    ]  # fmt: skip
    out: list[LiveEnvelope] = []
    for number, update in enumerate(updates):
        notification = {"sessionId": "s", "update": update}
        out += translator.update(SessionNotification.model_validate(notification).update, number)
    steps = [e for e in out if isinstance(e, Step)]
    assert [(s.status, s.result) for s in steps] == [
        ("running", None),
        ("succeeded", "a.txt\nb.txt\n"),
    ]
