"""What an ACP agent runs cannot reach the agent: each of the five real agents, in a real
bubblewrap sandbox of the chat's embedded runner, against the stand-in model.

The setup script leaves a daemon (``setsid``) and the agent's own shell tool runs a
command, both running :mod:`tests.agents.shield_attack` on every process of the agent:
forge JSON-RPC into its stdio through ``/proc/<pid>/fd``, read its output and answer its
permission request on its stdin, ``pidfd_getfd``, ``PTRACE_ATTACH``, open its ``mem``
and ``environ``, and ``SIGSTOP`` or ``SIGKILL`` it by pid, process group, ``tgkill`` and
pidfd; the tool also tries ``prlimit``, ``setpriority``, ``F_SETOWN`` and
``kill(-1, SIGKILL)``. The daemon attacks in rounds until the tool's attack is over, so
also while a permission request waits for the user. Every attempt is refused with a
permission error, every agent process survives to answer the prompt, the one permission
card reaches the user and is answered by the user, and the stream and the stored message
are the turn's own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
import trio

from benchmarks.support.model_server import ModelScript, start_model_server
from sandstream.core.schemas import AcpPreset, ClaudeCodeAgent, ConfigResponse
from sandstream.core.sse_parser import ServerSentEvent
from sandstream.server.chat import AgentProfile
from sandstream.server.chat.model.records import Environment
from tests.agents import shield_attack
from tests.chat.harness import (
    AGENTS_DIR,
    WORKSPACE,
    ChatServer,
    EventReader,
    allow,
    start_chat_server,
)
from tests.support.agents import ASKING, PRESETS, acp_spec

TEXT: Final = ("The attack ", "was refused.")
DEADLINE: Final = 150.0
PARAMS: Final = {"workspaceId": WORKSPACE}
ATTACK: Final = Path(shield_attack.__file__).read_text(encoding="utf-8")
SETUP: Final = (
    f"cat > attack.py <<'PY'\n{ATTACK}\nPY\n"
    "setsid python3 attack.py daemon > daemon.report 2>&1 < /dev/null &\n"
    "while [ ! -f daemon.ready ]; do sleep 0.05; done\n"  # out of the script's group
)
COMMAND: Final = (
    "python3 attack.py tool > tool.report 2>&1; touch tool.done; "
    "while [ ! -f daemon.done ]; do sleep 0.1; done; cat tool.report daemon.report"
)
REFUSED: Final = frozenset({"EACCES", "EPERM", "ENXIO"})
"""A permission error: refused by the kernel's ptrace check (``EACCES``, ``EPERM``), or a
socket that cannot be opened again (``ENXIO``)."""
ATTEMPTS: Final = ("forge", "steal-read", "steal-answer", "pidfd-getfd", "ptrace", "mem", "environ")
SIGNALS: Final = (
    "kill-SIGSTOP",
    "kill-SIGKILL",
    "group-SIGKILL",
    "tgkill-SIGKILL",
    "pidfd-SIGKILL",
    "procfd-SIGKILL",
)
TOOL_ONLY: Final = ("prlimit", "setpriority", "setown", "killall-SIGKILL")
"""What the agent's guard refuses to its tools (the setup script's Landlock domain scopes
signals and ``ptrace``, not limits or priorities)."""


def _data(event: ServerSentEvent) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.json.decode(event.data)
    return data


CLAUDE_CLI: Final = "claude-agent-sdk/cli.js"
"""The Claude Code CLI the claude preset's adapter runs, as the ``claude-code`` kind
runs it (in its npm prefix under the agents dir)."""
CLAUDE_ENV: Final = {
    "IS_SANDBOX": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}


def _refusals(report: str, attacker: str) -> dict[str, set[str]]:
    """What the attacker tried on which targets: attempt -> errnos; asserts it ran to its
    end, found targets, and that nothing worked."""
    assert f"{attacker} done" in report, report
    assert re.search(rf"^{attacker} target \S+", report, re.MULTILINE), report
    assert not re.search(rf"^{attacker} (DID|opened-but)", report, re.MULTILINE), report
    refused: dict[str, set[str]] = {}
    for attempt, errno in re.findall(rf"^{attacker} denied (\S+) \S+ (\S+)$", report, re.MULTILINE):
        refused.setdefault(attempt, set()).add(errno)
    return refused


def _assert_refused(tool_results: list[str]) -> None:
    """The one attack report came back to the model, and every attempt in it failed."""
    reports = [result for result in tool_results if "tool report" in result]
    assert len(reports) == 1, tool_results
    [report] = reports
    for attacker, attempts in (
        ("tool", ATTEMPTS + SIGNALS + TOOL_ONLY),
        ("daemon", ATTEMPTS + SIGNALS),
    ):
        refused = _refusals(report, attacker)
        assert set(attempts) <= refused.keys(), (attacker, refused, report)
        assert set().union(*refused.values()) <= REFUSED, (attacker, refused, report)


async def _turn(
    server: ChatServer,
) -> tuple[str, list[ServerSentEvent], list[dict[str, Any]]]:
    """The turn to its end, answering the agent's one permission request ``once``: its
    chat id, its events, and the permission cards it showed."""
    body = {"workspaceId": WORKSPACE, "message": "Attack", "workflowId": "wf_attack"}
    cards: list[dict[str, Any]] = []
    async with server.stream(body) as response, server.client() as client:
        assert response.status_code == 200
        reader = EventReader(response)
        chat_id = _data(await reader.until(lambda e: e.event == "start"))["chatId"]
        with trio.fail_after(DEADLINE):
            while (event := await reader.next()) is not None and event.event != "done":
                if event.event == "permission" and _data(event)["status"] == "pending":
                    cards.append(_data(event))
                    answer = await client.post(
                        f"/api/assistant/chats/{chat_id}/permissions/{_data(event)['id']}",
                        params=PARAMS,
                        json={"reply": "once"},
                    )
                    assert answer.status_code == 200, answer.text
    return chat_id, reader.events, cards


@pytest.mark.parametrize("preset", PRESETS)
async def test_nothing_the_agent_runs_reaches_the_agent(
    nursery: trio.Nursery, tmp_path: Path, preset: AcpPreset
) -> None:
    model = await start_model_server(nursery, ModelScript(command=COMMAND, text=TEXT))
    profile = AgentProfile(ConfigResponse(agent=acp_spec(preset, model)), {}, preset)
    server = await start_chat_server(
        nursery, tmp_path / "data", agent=profile, sandbox_allow=allow(model)
    )
    await server.store.put_environment(
        Environment(workspace_id=WORKSPACE, workflow_id="wf_attack", vars={}, setup_script=SETUP)
    )
    chat_id, events, cards = await _turn(server)

    _assert_refused(model.tool_results())

    # The turn is the agent's own: its one card, answered by the user; no forged text.
    kinds = [event.event for event in events]
    assert kinds[-2:] == ["result", "done"], kinds
    assert "FORGED" not in "".join(event.data for event in events)
    [result] = [_data(e) for e in events if e.event == "result"]
    assert result["message"].endswith("".join(TEXT))
    assert len(cards) == (1 if preset in ASKING else 0), cards
    permissions = [_data(e) for e in events if e.event == "permission"]
    resolved = [p for p in permissions if p["status"] != "pending"]
    assert [(p["id"], p["status"], p["reply"]) for p in resolved] == [
        (card["id"], "resolved", "once") for card in cards
    ]
    # The agent's own tool step, only (its status is the agent's to say: Codex may answer
    # the prompt before it says the command ended).
    steps = {_data(e)["id"] for e in events if e.event == "step"}
    assert len(steps) == 2, steps  # the session's and the command's
    chat = await server.wait_chat(chat_id, lambda chat: "activeMessageId" not in chat)
    stored = chat["messages"][-1]
    assert stored["status"] == "complete"
    assert "FORGED" not in str(stored)


async def test_nothing_the_claude_code_cli_runs_reaches_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The ``claude-code`` kind: the CLI itself, streaming, its Bash tool allowed."""
    [cli] = AGENTS_DIR.glob(f"claude-*/node_modules/@anthropic-ai/{CLAUDE_CLI}")
    model = await start_model_server(nursery, ModelScript(command=COMMAND, text=TEXT))
    agent = ClaudeCodeAgent(command=["node", str(cli)], extra_args=["--allowedTools", "Bash"])
    config = ConfigResponse(agent=agent, model="claude-sonnet-4-5")
    env = {**model.provider_env("claude"), **CLAUDE_ENV}
    server = await start_chat_server(
        nursery,
        tmp_path / "data",
        agent=AgentProfile(config, env, "claude-code"),
        sandbox_allow=allow(model),
    )
    await server.store.put_environment(
        Environment(workspace_id=WORKSPACE, workflow_id="wf_attack", vars={}, setup_script=SETUP)
    )
    chat_id, events, cards = await _turn(server)

    _assert_refused(model.tool_results())
    kinds = [event.event for event in events]
    assert kinds[-2:] == ["result", "done"], kinds
    assert "FORGED" not in "".join(event.data for event in events)
    [result] = [_data(e) for e in events if e.event == "result"]
    assert result["message"].endswith("".join(TEXT))
    assert cards == []
    chat = await server.wait_chat(chat_id, lambda chat: "activeMessageId" not in chat)
    assert chat["messages"][-1]["status"] == "complete"
