"""Metering through a turn's gateway: each model call of every protocol, streamed or
not, becomes one ``usage`` line of the turn's stream with the tokens the stand-in
reported; the turn's totals and the runner's counters agree; a call past the turn's
token budget gets the provider's own 429 of a spent quota and ends the turn
``budget_reached``."""

from __future__ import annotations

from typing import Any, Final

import httpx
import msgspec
import pytest
import trio

from benchmarks.support.model_server import ModelScript, ModelServer, start_model_server
from benchmarks.support.workspace import WorkspaceServer
from sandstream.core import ModelUsage, TokenBudget, Usage
from sandstream.server import Runner, TurnStream
from sandstream.server.runner import RunnerCollector
from tests.gateway.harness import REAL_KEY, provider_dispatch, runner
from tests.server.harness import scripted, shell

# (protocol, path, body) of one call; "stream" is set per test
CALLS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "anthropic": (
        "/anthropic/v1/messages",
        {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "chat": (
        "/openai/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ),
    "responses": ("/openai/responses", {"model": "m", "input": "hi"}),
    "gemini": (
        "/gemini/v1beta/models/m:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
}


def _headers(protocol: str, key: str) -> dict[str, str]:
    if protocol == "anthropic":
        return {"x-api-key": key, "anthropic-version": "2023-06-01"}
    if protocol == "gemini":
        return {"x-goog-api-key": key}
    return {"authorization": f"Bearer {key}"}


async def call(turn: TurnStream, protocol: str, *, stream: bool) -> httpx.Response:
    """One model call of ``protocol`` through ``turn``'s gateway."""
    assert turn.gateway is not None and turn.gateway.access is not None
    path, body = CALLS[protocol]
    body = dict(body)
    if protocol == "gemini":
        if stream:
            path = path.replace(":generateContent", ":streamGenerateContent?alt=sse")
    else:
        body["stream"] = stream
        if stream and protocol == "chat":
            body["stream_options"] = {"include_usage": True}
    headers = _headers(protocol, turn.gateway.credential)
    async with httpx.AsyncClient(base_url=turn.gateway.access.url, timeout=30) as client:
        return await client.post(path, json=body, headers=headers)


@pytest.fixture
async def model(nursery: trio.Nursery) -> ModelServer:
    return await start_model_server(nursery, ModelScript(), api_key=REAL_KEY)


def _dispatch(workspace: WorkspaceServer, model: ModelServer, **more: Any) -> Any:
    workspace.config = scripted(shell("sleep 300"))
    dispatch = provider_dispatch(workspace, model)
    return msgspec.structs.replace(dispatch, extensions=["usage"], **more)


async def _read(turn: TurnStream, lines: list[dict[str, Any]]) -> None:
    async for chunk in turn:
        lines.extend(msgspec.json.decode(line) for line in chunk.splitlines())


async def _until(condition: Any) -> None:
    with trio.fail_after(30):
        while not condition():
            await trio.sleep(0.01)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_each_call_s_usage_line_has_the_tokens_the_provider_reported(
    workspace: WorkspaceServer, model: ModelServer, stream: bool
) -> None:
    the_runner: Runner = runner()
    lines: list[dict[str, Any]] = []
    turn = the_runner.open_turn(_dispatch(workspace, model))
    async with turn, trio.open_nursery() as nursery:
        nursery.start_soon(_read, turn, lines)
        for protocol in CALLS:
            response = await call(turn, protocol, stream=stream)
            assert response.status_code == 200, response.text
        await _until(lambda: len([x for x in lines if x["type"] == "usage"]) == len(CALLS))
        usage = [line for line in lines if line["type"] == "usage"]
        turn.end("interrupted", "the test is done")
    assert [u["protocol"] for u in usage] == list(CALLS)
    expected = Usage()
    for line, reply in zip(usage, model.replies, strict=True):
        call_usage = msgspec.convert(line, ModelUsage)
        assert (call_usage.input_tokens, call_usage.output_tokens) == (
            reply.input_tokens,
            reply.output,
        ), line
        assert call_usage.complete and call_usage.status == 200 and call_usage.error is None
        assert call_usage.model == "m"
        expected += Usage(reply.input_tokens, reply.output)
    assert turn.processor.turn.usage == expected
    assert turn.processor.turn.model_calls == len(CALLS)
    metering = the_runner.metering
    assert metering.calls == {("anthropic", "succeeded"): 1, ("openai", "succeeded"): 2,
                              ("gemini", "succeeded"): 1}  # fmt: skip
    assert sum(metering.tokens.values()) == expected.total
    exposition = {m.name: m for m in RunnerCollector(the_runner).collect()}
    samples = {
        (s.labels["provider"], s.labels["kind"]): s.value
        for s in exposition["sandstream_model_tokens"].samples
    }
    assert samples[("anthropic", "input")] == model.replies[0].input_tokens


async def test_a_call_past_the_budget_gets_a_quota_429_and_ends_the_turn(
    workspace: WorkspaceServer, model: ModelServer
) -> None:
    the_runner = runner()
    budget = TokenBudget(tokens=5, budget="turn", limit=5)
    lines: list[dict[str, Any]] = []
    turn = the_runner.open_turn(_dispatch(workspace, model, budget=budget))
    async with turn, trio.open_nursery() as nursery:
        nursery.start_soon(_read, turn, lines)
        first = await call(turn, "chat", stream=False)
        assert first.status_code == 200  # under the budget when it began
        refused = await call(turn, "chat", stream=True)
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["type"] == "insufficient_quota" and error["code"] == "insufficient_quota"
    assert len(model.replies) == 1
    terminal = lines[-1]
    assert terminal["type"] == "error" and terminal["code"] == "budget_reached", lines
    used = model.replies[0].input_tokens + model.replies[0].output
    message = terminal["message"]
    assert f"used {used} tokens" in message and "budget of 5 tokens" in message
    assert [line["type"] for line in lines] == ["usage", "error"]
    assert turn.record is not None and turn.record.outcome == "budget_reached"
    assert the_runner.metering.calls[("openai", "over_budget")] == 1
