"""A failing provider as a chat sees it, with a real agent that retries (pi)
in a real ``sandstream serve``: each failed call is a ``usage`` event with the
provider's status and message, before the turn ends ``provider_unavailable``; the
stored message says the provider's status and message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import trio

from benchmarks.support.model_server import ModelScript, start_model_server
from tests.agents.test_gateway_agents import PARAMS, chat_turn, serve_without_model_access


async def test_a_failing_provider_is_noticed_at_once_and_its_turn_stored_with_its_status(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    model = await start_model_server(nursery, ModelScript(failure="status-500"))
    _served, client = await serve_without_model_access(
        nursery, tmp_path, "pi", model, "--provider-unavailable-after", "1"
    )
    async with client:
        events = await chat_turn(client, "pi", "Try")
        kinds = [e.event for e in events]
        assert kinds[-2:] == ["error", "done"], [(e.event, e.data) for e in events[-4:]]
        data: list[dict[str, Any]] = [msgspec.json.decode(e.data) for e in events]
        notices = [d for e, d in zip(events, data, strict=True) if e.event == "usage"]
        assert notices and kinds.index("usage") < kinds.index("error")
        assert notices[0]["status"] == 500 and "told to fail" in notices[0]["error"]
        error = data[-2]
        assert error["code"] == "provider_unavailable"
        chat_id = data[0]["chatId"]
        chat = (await client.get(f"/api/assistant/chats/{chat_id}", params=PARAMS)).json()
    [block] = [b for b in chat["messages"][-1]["content"] if b["type"] == "error"]
    assert block["code"] == "provider_unavailable"
    assert " 500 " in block["message"] and "told to fail" in block["message"], block
    assert chat["messages"][-1]["usage"]["modelCalls"] >= len(notices)
