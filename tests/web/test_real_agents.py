"""The five real ACP agents in Chromium: each turn's answer streams into the web app, and
the agents that ask (Claude Code, OpenCode, Gemini CLI) are answered from the
permission card; the turn's tokens, as the stand-in reported them through the model
gateway (each agent's protocol: anthropic, chat, responses, gemini), are stored on its
message and in the chat's total, and shown under the answer and above the thread (the
chat's total growing with each call, mid-turn). The
chat server runs them in bubblewrap against the stand-in model."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
from playwright.sync_api import BrowserContext

from benchmarks.support.model_server import ModelScript, ModelServer
from sandstream.core.schemas import AcpPreset, ConfigResponse
from sandstream.server.chat import AgentProfile
from tests.support.agents import ASKING, PRESETS, WRITE, acp_spec
from tests.web.harness import ServerThread, assistant, chat_id, send, signed_in

TEXT: Final = ("The file ", "says ", "hello ", "from ", "the ", "tool.")
SCRIPT: Final = ModelScript(command=WRITE, text=TEXT, pace_sec=0.01, hold_at=TEXT[2])
"""The text comes as a model's would, an event at a time; the model holds the answer
before its third chunk until the test has seen the first two in the page."""
RUNNING: Final = "article.message-assistant[data-status=running] .answer"
CARD: Final = "article.message-assistant .permission"
PENDING: Final = f"{CARD}.permission-pending"
CHAT_TOTAL_SHOWN: Final = (
    "() => /This chat: [1-9][0-9]* tokens/.test(document.querySelector('#chat-usage')?.innerText)"
)


def _agent(preset: AcpPreset) -> Callable[[ModelServer], AgentProfile]:
    def agent(model: ModelServer) -> AgentProfile:
        spec = acp_spec(preset, model)
        return AgentProfile(ConfigResponse(agent=spec), description=f"acp {preset}")

    return agent


@pytest.mark.parametrize("preset", PRESETS)
def test_a_real_agent_streams_into_the_page_and_is_answered_there(
    context: BrowserContext, tmp_path: Path, preset: AcpPreset
) -> None:
    with ServerThread(tmp_path / "data", model=(SCRIPT, _agent(preset))) as server:
        page = signed_in(context, server)
        send(page, "Write the file")
        if preset in ASKING:
            page.wait_for_selector(PENDING)
            page.click(f'{PENDING} button[data-reply="once"]')
            page.wait_for_selector(f'{CARD}.permission-resolved [data-reply="once"]')
        # The answer so far shows while the model holds the rest back.
        page.wait_for_function(
            "([selector, text]) => document.querySelector(selector)?.innerText.includes(text)",
            arg=[RUNNING, "".join(TEXT[:2]).strip()],
        )
        assert "".join(TEXT[2:]) not in page.inner_text(RUNNING)
        # The chat's total counts the calls that ended so far (the held one not yet).
        page.wait_for_function(CHAT_TOTAL_SHOWN)
        midway = _tokens(page.inner_text("#chat-usage"))
        server.release_model()
        done = assistant(page, "complete")
        answer = page.inner_text(f"{done} .answer").strip()
        assert answer.endswith("".join(TEXT))
        replies = server.model_replies()
        expected = {
            "inputTokens": sum(r.input_tokens for r in replies),
            "outputTokens": sum(r.output for r in replies),
            "modelCalls": len(replies),
        }
        chat = server.chat(chat_id(page))
        assert chat["messages"][-1]["usage"] == expected
        assert chat["usage"] == expected
        total = expected["inputTokens"] + expected["outputTokens"]
        calls = f"{len(replies)} model call{'' if len(replies) == 1 else 's'}"
        shown = page.inner_text(f"{done} .usage")
        assert shown.startswith(f"{total} tokens") and calls in shown, shown
        page.wait_for_function(
            "(text) => document.querySelector('#chat-usage')?.innerText.includes(text)",
            arg=f"{total} tokens",
        )
        assert 0 < midway < total


def _tokens(shown: str) -> int:
    """The token count of a usage line ("This chat: 1234 tokens (…)")."""
    match = re.search(r"(\d+) tokens", shown)
    assert match is not None, shown
    return int(match[1])
