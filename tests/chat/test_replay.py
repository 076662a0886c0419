"""Replay: the sandbox sees the last 20 messages of the conversation, no more."""

from __future__ import annotations

from pathlib import Path

import trio

from sandstream.core.persistence import PersistedMessage, TextBlock
from sandstream.server.chat import load_agent_profile
from sandstream.server.chat.ids import new_id, now_ms
from sandstream.server.chat.models import TurnFinish, TurnRequest
from tests.chat.harness import WORKSPACE, ChatServer, start_chat_server
from tests.support.model_server import reply, start_model_server


async def _seed_turns(server: ChatServer, count: int) -> str:
    """``count`` settled turns through the store's own turn path; returns the chat id."""
    chat_id: str | None = None
    for n in range(count):
        now = now_ms()
        session_id = new_id("sess")
        start = await server.store.begin_turn(
            TurnRequest(
                workspace_id=WORKSPACE,
                chat_id=chat_id,
                workflow_id=None,
                text=f"question {n}",
                attachment_ids=[],
                user_message_id=new_id("msg"),
                assistant_message_id=new_id("msg"),
                session_id=session_id,
                holder=f"seed:{session_id}",
                lease_expires_at=now + 30_000,
                tokens=[],
                now=now,
                replay_limit=20,
            )
        )
        chat_id = start.chat.id
        await server.store.finish_turn(
            TurnFinish(
                chat_id=chat_id,
                session_id=session_id,
                holder=start.holder,
                message=PersistedMessage(
                    id=start.session.assistant_message_id or "",
                    role="assistant",
                    content=[TextBlock(f"answer {n}")],
                    created_at=now_ms(),
                    status="complete",
                ),
                now=now_ms(),
            )
        )
    assert chat_id is not None
    return chat_id


async def test_after_25_turns_the_container_receives_exactly_the_last_20(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    model = await start_model_server(nursery)
    agent = load_agent_profile(
        {
            "OPENAI_MODEL": "test-model",
            "OPENAI_BASE_URL": model.url,
            "OPENAI_API_KEY": model.api_key,
        }
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    chat_id = await _seed_turns(server, 25)  # 50 messages
    model.add(reply("the 26th answer"))
    run = await server.turn("question 25", chat_id=chat_id)
    assert run.status == 200 and run.kinds[-2:] == ["result", "done"], run.body[-500:]
    assert run.data("result")[0]["message"] == "the 26th answer"
    [request] = model.requests
    messages = request["messages"]
    assert messages[0]["role"] == "system"
    replayed = [(m["role"], m["content"]) for m in messages[1:-1]]
    expected = []
    for n in range(15, 25):
        expected += [("user", f"question {n}"), ("assistant", f"answer {n}")]
    assert replayed == expected  # exactly the last 20 messages, oldest first
    assert messages[-1] == {"role": "user", "content": "question 25"}
    chat = await server.chat(chat_id)
    assert len(chat["messages"]) == 52
    assert chat["messages"][-1]["content"][0] == {"type": "text", "text": "the 26th answer"}
    # Real turns feed the window too: the next dispatch sees this exchange last.
    model.add(reply("the 27th answer"))
    await server.turn("question 26", chat_id=chat_id)
    replayed = [(m["role"], m["content"]) for m in model.requests[1]["messages"][1:-1]]
    assert len(replayed) == 20
    assert replayed[-2:] == [("user", "question 25"), ("assistant", "the 26th answer")]
