"""The offline demo agent a fresh ``sandstream serve`` answers with: paced like a real
agent (a turn of 10 to 20 s, several real skill steps, its text in pieces), so that leaving
and resuming, a second viewer and the stop button can be tried by hand."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import trio

from sandstream.container.agents.scripted import split_words
from sandstream.core.schemas import ConfigResponse, ScriptedAgent
from sandstream.server.chat import AgentProfile, load_agent_profile
from sandstream.server.chat.model.agent_profile import demo_plan
from sandstream.server.chat.model.records import DispatchRecord
from tests.chat.harness import start_chat_server

pytestmark = pytest.mark.usefixtures("chat_database")

JOB_SECONDS = 5.0
"""The demo's five-tick shell job."""
PROMPT = "hello there"


def _paced_seconds(plan: ScriptedAgent) -> float:
    """The time the plan spends waiting on purpose: step delays, the job, the pieces."""
    pieces = len(split_words(plan.message.replace("{prompt}", PROMPT)))
    pieces += len(split_words(plan.reasoning))
    return sum(step.delay_sec for step in plan.steps) + JOB_SECONDS + pieces * plan.delta_delay_sec


def test_the_default_agent_is_the_paced_demo() -> None:
    profile = load_agent_profile({})
    record = DispatchRecord(
        id="ses_x", kind="chat", workspace_id="ws1", prompt=PROMPT, created_at=0
    )
    plan = profile.config_for(record).agent
    assert isinstance(plan, ScriptedAgent)
    assert 10.0 <= _paced_seconds(plan) <= 20.0
    assert len(plan.steps) >= 4 and all(step.delay_sec > 0 for step in plan.steps)
    assert any("sleep 1" in str(step.args) for step in plan.steps)
    assert plan.reasoning and plan.delta_delay_sec > 0


async def test_every_demo_step_is_a_real_skill_that_succeeds(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The demo's own steps, unpaced (its job still takes five seconds)."""
    plan = demo_plan(PROMPT)
    unpaced = msgspec.structs.replace(
        plan,
        steps=[msgspec.structs.replace(step, delay_sec=0.0) for step in plan.steps],
        delta_delay_sec=0.0,
    )
    agent = AgentProfile(ConfigResponse(agent=unpaced), description="the demo, unpaced")
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    run = await server.turn(PROMPT)
    assert run.kinds[-2:] == ["result", "done"], run.body[-500:]
    ended = [step for step in run.data("step") if step["status"] != "running"]
    assert [step["name"] for step in ended] == [step.tool for step in plan.steps]
    assert all(step["status"] == "succeeded" for step in ended), ended
    assert len(run.data("delta")) > 20
    [result] = run.data("result")
    assert PROMPT in result["message"]
    stored = (await server.chat(run.chat_id))["messages"][-1]
    assert "echo.md" in msgspec.json.encode(stored).decode(), stored
