"""The stand-in model server: each provider's streaming wire protocol, read back as a
client would (SSE parsed by the core's SSEParser, then folded per protocol), its script
(shell tool call first, final text after the tool result), recording and failure modes."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.support.model_server import (
    HttpError,
    ModelScript,
    ModelServer,
    reply,
    start_model_server,
)
from benchmarks.support.model_wire import Protocol, Reply, ToolCall, render_stream
from benchmarks.support.servers import http1_client
from sandstream.core.sse_parser import ServerSentEvent, SSEParser


@dataclass
class Folded:
    """What a client makes of a streamed answer."""

    reasoning: str = ""
    text: str = ""
    text_chunks: list[str] = field(default_factory=list)
    tool: str | None = None
    arguments: str = ""
    stop: str | None = None
    done: bool = False


def _fold_anthropic(out: Folded, event: ServerSentEvent, data: Any) -> None:
    assert event.event == data["type"]
    if data["type"] == "content_block_start" and data["content_block"]["type"] == "tool_use":
        out.tool = data["content_block"]["name"]
    delta = data.get("delta", {})
    if delta.get("type") == "thinking_delta":
        out.reasoning += delta["thinking"]
    elif delta.get("type") == "text_delta":
        out.text += delta["text"]
        out.text_chunks.append(delta["text"])
    elif delta.get("type") == "input_json_delta":
        out.arguments += delta["partial_json"]
    elif data["type"] == "message_delta":
        out.stop = delta["stop_reason"]
    elif data["type"] == "message_stop":
        out.done = True


def _fold_chat(out: Folded, event: ServerSentEvent, data: Any) -> None:
    for choice in data["choices"]:
        delta = choice["delta"]
        out.reasoning += delta.get("reasoning_content", "")
        if delta.get("content"):
            out.text += delta["content"]
            out.text_chunks.append(delta["content"])
        for call in delta.get("tool_calls", []):
            out.tool = call["function"].get("name", out.tool)
            out.arguments += call["function"]["arguments"]
        out.stop = choice["finish_reason"] or out.stop


def _fold_responses(out: Folded, event: ServerSentEvent, data: Any) -> None:
    assert event.event == data["type"]
    kind = data["type"]
    if kind == "response.reasoning_summary_text.delta":
        out.reasoning += data["delta"]
    elif kind == "response.output_text.delta":
        out.text += data["delta"]
        out.text_chunks.append(data["delta"])
    elif kind == "response.output_item.added" and data["item"]["type"] == "function_call":
        out.tool = data["item"]["name"]
    elif kind == "response.function_call_arguments.delta":
        out.arguments += data["delta"]
    elif kind == "response.completed":
        out.done = True
        out.stop = data["response"]["status"]


def _fold_gemini(out: Folded, event: ServerSentEvent, data: Any) -> None:
    candidate = data["candidates"][0]
    for part in candidate["content"]["parts"]:
        if "functionCall" in part:
            out.tool = part["functionCall"]["name"]
            out.arguments = json.dumps(part["functionCall"]["args"])
        elif part.get("thought"):
            out.reasoning += part["text"]
        else:
            out.text += part["text"]
            out.text_chunks.append(part["text"])
    if "finishReason" in candidate:
        out.stop = candidate["finishReason"]
        out.done = True


_FOLDS: dict[Protocol, Callable[[Folded, ServerSentEvent, Any], None]] = {
    "anthropic": _fold_anthropic,
    "chat": _fold_chat,
    "responses": _fold_responses,
    "gemini": _fold_gemini,
}
"""Each protocol's reading of one event (its JSON ``data``) into what the client has."""


def _fold(protocol: Protocol, events: list[ServerSentEvent]) -> Folded:
    out = Folded()
    fold = _FOLDS[protocol]
    for event in events:
        if event.data == "[DONE]":
            out.done = True
            continue
        fold(out, event, json.loads(event.data))
    return out


def _parse(body: bytes, cuts: list[int] | None = None) -> list[ServerSentEvent]:
    parser = SSEParser()
    events: list[ServerSentEvent] = []
    start = 0
    for cut in sorted(cuts or []):
        events.extend(parser.feed(body[start:cut]))
        start = cut
    events.extend(parser.feed(body[start:]))
    return events


KEY = {"Authorization": "Bearer sk-test-key"}
SHELL = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
CODEX_SHELL = {
    "type": "object",
    "properties": {"command": {"type": "array", "items": {"type": "string"}}},
    "required": ["command"],
}

# (protocol, path, the request with no tool result yet, the same with one, the tool)
REQUESTS: dict[Protocol, tuple[str, dict[str, Any], dict[str, Any], str]] = {
    "anthropic": (
        "/v1/messages",
        {
            "model": "claude-x",
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
            "tools": [
                {"name": "Read", "input_schema": {}},
                {"name": "Bash", "input_schema": SHELL},
            ],
        },
        {
            "model": "claude-x",
            "stream": True,
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [{"type": "text", "text": "out-1"}],
                        }
                    ],
                },
            ],
            "tools": [{"name": "Bash", "input_schema": SHELL}],
        },
        "Bash",
    ),
    "chat": (
        "/v1/chat/completions",
        {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": SHELL}}],
        },
        {
            "model": "m",
            "stream": True,
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "tool", "tool_call_id": "t", "content": "out-1"},
            ],
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": SHELL}}],
        },
        "bash",
    ),
    "responses": (
        "/v1/responses",
        {
            "model": "m",
            "stream": True,
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "go"}],
                }
            ],
            "tools": [
                {"type": "custom", "name": "apply_patch"},
                {"type": "function", "name": "shell", "parameters": CODEX_SHELL},
            ],
        },
        {
            "model": "m",
            "stream": True,
            "input": [
                {"type": "function_call", "call_id": "t", "name": "shell", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "t", "output": "out-1"},
            ],
            "tools": [{"type": "function", "name": "shell", "parameters": CODEX_SHELL}],
        },
        "shell",
    ),
    "gemini": (
        "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
        {
            "contents": [{"role": "user", "parts": [{"text": "go"}]}],
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": "run_shell_command", "parametersJsonSchema": SHELL}
                    ]
                }
            ],
        },
        {
            "contents": [
                {"role": "user", "parts": [{"text": "go"}]},
                {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "run_shell_command", "args": {}}}],
                },
                {
                    "role": "user",
                    "parts": [
                        {
                            "functionResponse": {
                                "name": "run_shell_command",
                                "response": {"output": "out-1"},
                            }
                        }
                    ],
                },
            ],
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": "run_shell_command", "parametersJsonSchema": SHELL}
                    ]
                }
            ],
        },
        "run_shell_command",
    ),
}


async def _post_stream(
    server: ModelServer, path: str, body: Mapping[str, Any]
) -> tuple[int, bytes]:
    async with http1_client(server.base_url, headers=KEY) as client:
        response = await client.post(path, json=body)
        return response.status_code, response.content


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_a_shell_tool_call_then_the_final_text(
    nursery: trio.Nursery, protocol: Protocol
) -> None:
    path, first, second, tool = REQUESTS[protocol]
    script = ModelScript(
        command="ls -l /", text=("Done: ", "it ", "listed."), reasoning=("I ", "think")
    )
    server = await start_model_server(nursery, script)

    status, body = await _post_stream(server, path, first)
    assert status == 200
    call = _fold(protocol, _parse(body))
    assert call.tool == tool
    arguments = json.loads(call.arguments)
    expected = ["bash", "-lc", "ls -l /"] if protocol == "responses" else "ls -l /"
    assert arguments["command"] == expected
    assert call.text == ""
    assert call.done or protocol == "chat"

    status, body = await _post_stream(server, path, second)
    assert status == 200
    final = _fold(protocol, _parse(body))
    assert final.tool is None
    assert final.text_chunks == ["Done: ", "it ", "listed."]
    assert final.reasoning == "I think"
    assert final.done

    assert server.tool_results() == ["out-1"]
    assert [r.protocol for r in server.generations()] == [protocol, protocol]


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_a_held_answer_stops_before_the_text_until_released(
    nursery: trio.Nursery, protocol: Protocol
) -> None:
    path, _, second, _ = REQUESTS[protocol]
    server = await start_model_server(
        nursery, ModelScript(text=("a1 ", "b2 ", "c3"), hold_at="b2 ")
    )
    received: list[bytes] = []
    async with (
        http1_client(server.base_url, headers=KEY) as client,
        client.stream("POST", path, json=second) as response,
    ):

        async def read() -> None:
            received.extend([chunk async for chunk in response.aiter_raw()])

        async with trio.open_nursery() as reading:
            reading.start_soon(read)
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            assert received == [], "the held answer was sent before it was released"
            server.release()
    body = b"".join(received)
    assert _fold(protocol, _parse(body)).text_chunks == ["a1 ", "b2 ", "c3"]


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_non_streaming_requests_get_a_whole_answer(
    nursery: trio.Nursery, protocol: Protocol
) -> None:
    path, _, second, _ = REQUESTS[protocol]
    server = await start_model_server(nursery, ModelScript(text=("a", "b")))
    body = {k: v for k, v in second.items() if k != "stream"}
    path = path.replace("streamGenerateContent?alt=sse", "generateContent")
    status, raw = await _post_stream(server, path, body)
    assert status == 200
    answer = json.loads(raw)
    text = {
        "anthropic": lambda a: a["content"][0]["text"],
        "chat": lambda a: a["choices"][0]["message"]["content"],
        "responses": lambda a: a["output"][0]["content"][0]["text"],
        "gemini": lambda a: a["candidates"][0]["content"]["parts"][0]["text"],
    }[protocol](answer)
    assert text == "ab"


async def test_a_structured_question_gets_a_value_of_its_schema(nursery: trio.Nursery) -> None:
    server = await start_model_server(nursery, ModelScript())
    schema = {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "next_speaker": {"type": "string", "enum": ["user", "model"]},
        },
        "required": ["reasoning", "next_speaker"],
    }
    body = {
        "contents": [{"role": "user", "parts": [{"text": "who?"}]}],
        "generationConfig": {"responseJsonSchema": schema},
    }
    status, raw = await _post_stream(server, "/v1beta/models/g:generateContent", body)
    assert status == 200
    text = json.loads(raw)["candidates"][0]["content"]["parts"][0]["text"]
    assert json.loads(text) == {"reasoning": "", "next_speaker": "user"}


async def test_model_lists_and_token_counts(nursery: trio.Nursery) -> None:
    server = await start_model_server(nursery, ModelScript())
    async with http1_client(server.base_url, headers=KEY) as client:
        openai = (await client.get("/v1/models")).json()
        anthropic = (
            await client.get("/v1/models", headers={"anthropic-version": "2023-06-01"})
        ).json()
        gemini = (await client.get("/v1beta/models")).json()
        counted = (await client.post("/v1/messages/count_tokens", json={"messages": []})).json()
        unknown = await client.post("/v2/whatever", json={})
        not_json = await client.post("/v1/messages", content=b"{nope")
    assert openai["object"] == "list" and openai["data"][0]["id"]
    assert anthropic["data"][0]["type"] == "model"
    assert gemini["models"][0]["name"].startswith("models/")
    assert counted == {"input_tokens": 10}
    assert unknown.status_code == 404
    assert not_json.status_code == 400
    assert [r.path for r in server.received][-2:] == ["/v2/whatever", "/v1/messages"]
    assert server.generations() == []


async def test_routes_answer_under_a_path_prefix(nursery: trio.Nursery) -> None:
    path, first, _, _ = REQUESTS["chat"]
    server = await start_model_server(nursery, ModelScript())
    status, body = await _post_stream(server, "/api" + path, first)
    assert status == 200
    assert _fold("chat", _parse(body)).tool == "bash"


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_failure_500(nursery: trio.Nursery, protocol: Protocol) -> None:
    path, first, _, _ = REQUESTS[protocol]
    server = await start_model_server(nursery, ModelScript(failure="status-500"))
    status, body = await _post_stream(server, path, first)
    assert status == 500
    assert json.loads(body)["error"]["message"]


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_failure_drop_ends_the_connection_mid_stream(
    nursery: trio.Nursery, protocol: Protocol
) -> None:
    path, first, _, _ = REQUESTS[protocol]
    server = await start_model_server(nursery, ModelScript(failure="drop"))
    received = b""
    async with (
        http1_client(server.base_url, headers=KEY) as client,
        client.stream("POST", path, json=first) as response,
    ):
        assert response.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            async for chunk in response.aiter_raw():
                received += chunk
    folded = _fold(protocol, _parse(received))
    assert not folded.done


async def test_failure_stall_sends_nothing_more(nursery: trio.Nursery) -> None:
    path, first, _, _ = REQUESTS["anthropic"]
    server = await start_model_server(nursery, ModelScript(failure="stall"))
    parser = SSEParser()
    events: list[ServerSentEvent] = []
    async with (
        http1_client(server.base_url, headers=KEY) as client,
        client.stream("POST", path, json=first) as response,
    ):
        chunks = response.aiter_raw()
        while len(events) < 2:
            events.extend(parser.feed(await chunks.__anext__()))
        with trio.move_on_after(0.3) as waited:
            await chunks.__anext__()
        assert waited.cancelled_caught
    assert [e.event for e in events] == ["message_start", "content_block_start"]


_chunks = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5).map(tuple)


@settings(max_examples=150, deadline=None)
@given(
    protocol=st.sampled_from(list(REQUESTS)),
    text=_chunks,
    reasoning=st.lists(st.text(min_size=1, max_size=8), max_size=3).map(tuple),
    command=st.text(max_size=30),
    call=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=6),
)
def test_every_chunking_of_a_stream_folds_to_the_reply(
    protocol: Protocol,
    text: tuple[str, ...],
    reasoning: tuple[str, ...],
    command: str,
    call: bool,
    cuts: list[int],
) -> None:
    tool_call = ToolCall("c1", "bash", {"command": command}) if call else None
    reply = Reply("m", reasoning=reasoning, text=text, tool_call=tool_call)
    body = b"".join(e.encode() for e in render_stream(protocol, reply))
    folded = _fold(protocol, _parse(body, [c % (len(body) + 1) for c in cuts]))
    assert folded.text == "".join(text)
    assert folded.reasoning == "".join(reasoning)
    if call:
        assert json.loads(folded.arguments) == {"command": command}


async def test_queued_answers_go_first_and_a_wrong_key_is_refused(nursery: trio.Nursery) -> None:
    path, first, _, _ = REQUESTS["chat"]
    server = await start_model_server(nursery)  # no script: queued answers only
    server.add(reply("queued"), HttpError(503))
    async with http1_client(server.base_url, headers=KEY) as client:
        body = {**first, "stream": False}
        answered = (await client.post(path, json=body)).json()
        failed = await client.post(path, json=body)
        exhausted = await client.post(path, json=body)
    async with http1_client(server.base_url, headers={"x-api-key": "wrong"}) as client:
        refused = await client.post("/v1/messages", json=REQUESTS["anthropic"][1])
    assert answered["choices"][0]["message"]["content"] == "queued"
    assert failed.status_code == 503
    assert exhausted.status_code == 500
    assert refused.status_code == 401
    assert len(server.requests) == 3  # the refused one never reached the model
