"""The tokens of a chat's turns, as the chat sees them: the container's own OpenAI loop
calling the stand-in model through the embedded runner's gateway, in a bubblewrap
sandbox. Each model call is a ``usage`` event of the turn's SSE with the tokens the
stand-in reported; the turn's sum is stored on its message and added to the chat's
total; a turn past its budget ends ``budget_reached`` (stored, the chat free), and one
over the workspace's budget for the day is refused before it starts; a failing
provider's call shows at once as a ``usage`` event with its status and message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from benchmarks.support.model_server import (
    ModelScript,
    ModelServer,
    start_model_server,
    tool_calls,
)
from sandstream.server.chat import load_agent_profile
from tests.chat.harness import ChatServer, TurnRun, allow, start_chat_server
from tests.chat.test_ui_message_stream import new_chat, use_chat

pytestmark = pytest.mark.usefixtures("chat_database")


async def _server(
    nursery: trio.Nursery, tmp_path: Path, model: ModelServer, **overrides: Any
) -> ChatServer:
    assert model.api_key is not None
    agent = load_agent_profile(
        {
            "OPENAI_MODEL": "test-model",
            "OPENAI_BASE_URL": model.url,
            "OPENAI_API_KEY": model.api_key,
        }
    )
    return await start_chat_server(
        nursery, tmp_path, agent=agent, sandbox_allow=allow(model), **overrides
    )


def _stored(chat: dict[str, Any], run: TurnRun) -> dict[str, Any]:
    message_id = run.start["assistantMessageId"]
    messages: list[dict[str, Any]] = chat["messages"]
    [message] = [m for m in messages if m["id"] == message_id]
    return message


def _sum(calls: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "inputTokens": sum(c["input_tokens"] for c in calls),
        "outputTokens": sum(c["output_tokens"] for c in calls),
        "modelCalls": len(calls),
    }


async def test_each_call_s_tokens_stream_and_the_turn_s_sum_is_stored(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    model = await start_model_server(nursery, ModelScript(command="echo metered"))
    server = await _server(nursery, tmp_path, model)
    first = await server.turn("run it")
    assert first.kinds[-2:] == ["result", "done"], first.body[-500:]
    calls = first.data("usage")
    assert len(calls) == len(model.replies) >= 1
    for call, reply in zip(calls, model.replies, strict=True):
        assert (call["input_tokens"], call["output_tokens"]) == (reply.input_tokens, reply.output)
        assert call["protocol"] == "chat" and call["status"] == 200
    chat = await server.chat(first.chat_id)
    assert _stored(chat, first)["usage"] == _sum(calls)
    assert chat["usage"] == _sum(calls)
    second = await server.turn("again", chat_id=first.chat_id)
    both = calls + second.data("usage")
    chat = await server.chat(first.chat_id)
    assert chat["usage"] == _sum(both)
    user = next(m for m in chat["messages"] if m["role"] == "user")
    assert "usage" not in user


async def test_budgets_end_a_turn_and_refuse_the_next_once_the_day_is_spent(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    model = await start_model_server(nursery, ModelScript(command="echo over"))
    server = await _server(
        nursery, tmp_path, model, turn_token_budget=1, workspace_daily_token_budget=3
    )
    model.add(tool_calls(("no_such_tool", {})))  # 2 tokens, and the loop calls again
    first = await server.turn("spend")
    [error] = first.data("error")
    assert error["code"] == "budget_reached", first.body[-800:]
    [call] = first.data("usage")  # the second call was refused
    used = call["input_tokens"] + call["output_tokens"]
    assert f"used {used} tokens" in error["message"] and "budget of 1 tokens" in error["message"]
    chat = await server.chat(first.chat_id)
    stored = _stored(chat, first)
    assert stored["status"] == "failed" and stored["usage"] == _sum([call])
    assert {"type": "error", "code": "budget_reached", "message": error["message"]} in stored[
        "content"
    ]
    model.add(tool_calls(("no_such_tool", {})))
    second = await server.turn("spend more", chat_id=first.chat_id)  # the chat is free
    assert second.status == 200 and second.data("error")[0]["code"] == "budget_reached"
    third = await server.turn("once more", chat_id=first.chat_id)  # 4 of 3 spent today
    assert third.status == 429, third.body
    problem = third.problem
    assert problem["type"] == "urn:sandstream:problem:token-budget-spent"
    assert problem["budgetTokens"] == 3 and problem["usedTokens"] == 4
    assert int(third.headers["Retry-After"]) > 0
    assert len((await server.chat(first.chat_id))["messages"]) == 4


async def test_a_failing_provider_s_call_shows_as_a_usage_event_before_the_turn_ends(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The container's OpenAI loop gives up at the first failure; the notice is there
    before its error (a retrying agent's turn: tests/agents/test_usage_agents.py)."""
    model = await start_model_server(nursery, ModelScript(failure="status-500"))
    server = await _server(nursery, tmp_path, model)
    run = await server.turn("fail")
    kinds = run.kinds
    assert kinds[-2:] == ["error", "done"], run.body[-800:]
    [failed] = run.data("usage")
    assert kinds.index("usage") < kinds.index("error")
    assert failed["status"] == 500 and "told to fail" in failed["error"], failed
    assert (failed["input_tokens"], failed["output_tokens"]) == (0, 0)
    stored = _stored(await server.chat(run.chat_id), run)
    assert stored["usage"] == {"modelCalls": 1}


async def test_use_chat_gets_the_turn_s_tokens_as_message_metadata(
    nursery: trio.Nursery, tmp_path: Path, node: Path
) -> None:
    """The AI SDK's own client (``ai``'s transport and ``readUIMessageStream``, over a
    real socket) builds the message's ``metadata.usage``: the stored message's usage."""
    model = await start_model_server(nursery, ModelScript(command="echo metered"))
    server = await _server(nursery, tmp_path, model)
    chat_id = await new_chat(server)
    output = await use_chat(node, server, chatId=chat_id, text="run it")
    assert output["errors"] == []
    chat = await server.chat(chat_id)
    stored = chat["messages"][-1]
    assert stored["usage"]["modelCalls"] == len(model.replies) >= 1
    assert output["message"]["metadata"] == {"usage": stored["usage"]}
    assert output["message500"]["metadata"] == {"usage": stored["usage"]}
