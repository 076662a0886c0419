"""The four model-provider wire formats the stand-in model server speaks, as plain data.

Each protocol has a reader (request body → :class:`Conversation`: the tools offered, the
tool results already in the conversation, whether it streams) and writers (a
:class:`Reply` → the JSON of a non-streaming answer, or the list of SSE events of a
streaming one, exactly as the provider frames them):

- ``anthropic`` — Messages (``POST /v1/messages``): ``message_start``,
  ``content_block_start``/``delta``/``stop`` (thinking, text, tool_use with
  ``input_json_delta``), ``message_delta`` with ``stop_reason``, ``message_stop``;
- ``chat`` — OpenAI Chat Completions (``POST /v1/chat/completions``): ``chat.completion.chunk``
  objects (``reasoning_content``, ``content``, ``tool_calls`` deltas), then ``[DONE]``;
- ``responses`` — OpenAI Responses (``POST /v1/responses``): ``response.created`` …
  ``response.output_item.added``/``done``, ``output_text.delta``,
  ``function_call_arguments.delta``, reasoning summary deltas, ``response.completed``;
- ``gemini`` — ``streamGenerateContent?alt=sse``: ``GenerateContentResponse`` objects
  (``thought`` parts, ``functionCall`` parts, text parts, ``finishReason``).

Nothing here does I/O. A request body that is not what the protocol sends raises
:class:`WireError` (the server answers it 400).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "SHELL_TOOLS",
    "Conversation",
    "Protocol",
    "Reply",
    "SseEvent",
    "ToolCall",
    "WireError",
    "read_request",
    "render_json",
    "render_stream",
    "schema_example",
    "shell_arguments",
]

Protocol = Literal["anthropic", "chat", "responses", "gemini"]

# The shell tools of the agents, as they name them in their tool lists, in order of
# preference: Claude Code ``Bash``; OpenCode and pi ``bash``; Codex ``shell``,
# ``shell_command`` or ``exec_command``; Gemini CLI ``run_shell_command``.
SHELL_TOOLS = ("Bash", "bash", "shell_command", "shell", "exec_command", "run_shell_command")


class WireError(ValueError):
    """A request body that the protocol's clients never send."""


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event: its ``event:`` name (``None``: none sent) and ``data:``."""

    data: str
    event: str | None = None

    def encode(self) -> bytes:
        head = f"event: {self.event}\n" if self.event is not None else ""
        return f"{head}data: {self.data}\n\n".encode()


@dataclass(frozen=True)
class Conversation:
    """What the stand-in needs from a request: the tools (name → JSON schema of their
    arguments), the text of each tool result in the conversation, the model asked for,
    whether to stream, a JSON schema the answer must follow (Gemini's structured
    output), and whether the conversation ends with a tool result (else with what the
    user said)."""

    tools: Mapping[str, Mapping[str, Any]]
    tool_results: tuple[str, ...]
    model: str
    stream: bool
    response_schema: Mapping[str, Any] | None = None
    ends_with_result: bool = False

    def shell_tool(self) -> str | None:
        """The name of the agent's shell tool among the tools offered, if any."""
        return next((name for name in SHELL_TOOLS if name in self.tools), None)


@dataclass(frozen=True)
class ToolCall:
    """A call of tool ``name`` with ``arguments`` (JSON object) under ``call_id``."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """One model answer: reasoning chunks, text chunks, then at most one tool call."""

    model: str
    reasoning: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    tool_call: ToolCall | None = None
    message_id: str = "msg_stand_in"
    input_tokens: int = 10
    output_tokens: int = field(default=0)

    @property
    def output(self) -> int:
        return self.output_tokens or max(1, sum(len(t) for t in (*self.reasoning, *self.text)))


# ---------------------------------------------------------------- reading requests


def _text_of(content: Any) -> str:
    """The text in a tool result's content, whatever shape the protocol gives it."""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        for key in ("text", "output", "content", "result", "stdout", "llmContent"):
            if key in content:
                return _text_of(content[key])
        return json.dumps(content)
    if isinstance(content, Iterable):
        return "".join(_text_of(part) for part in content)
    return "" if content is None else str(content)


def _object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise WireError("the request body is not a JSON object")
    return body


def _list(body: Mapping[str, Any], key: str) -> list[Any]:
    value = body.get(key) or []
    if not isinstance(value, list):
        raise WireError(f"{key!r} is not a list")
    return value


def _read_anthropic(body: Mapping[str, Any]) -> Conversation:
    tools = {
        t["name"]: t.get("input_schema") or {}
        for t in _list(body, "tools")
        if isinstance(t, Mapping) and "name" in t
    }
    results: list[str] = []
    last: list[str] = []
    for message in _list(body, "messages"):
        content = message.get("content") if isinstance(message, Mapping) else None
        last = []
        if isinstance(content, list):
            last = [
                _text_of(block.get("content"))
                for block in content
                if isinstance(block, Mapping) and block.get("type") == "tool_result"
            ]
            results.extend(last)
    model, stream = str(body.get("model", "")), bool(body.get("stream"))
    return Conversation(tools, tuple(results), model, stream, ends_with_result=bool(last))


def _read_chat(body: Mapping[str, Any]) -> Conversation:
    tools = {}
    for tool in _list(body, "tools"):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and "name" in function:
            tools[function["name"]] = function.get("parameters") or {}
    messages = [m for m in _list(body, "messages") if isinstance(m, Mapping)]
    results = tuple(_text_of(m.get("content")) for m in messages if m.get("role") == "tool")
    ends = bool(messages) and messages[-1].get("role") == "tool"
    model, stream = str(body.get("model", "")), bool(body.get("stream"))
    return Conversation(tools, results, model, stream, ends_with_result=ends)


def _read_responses(body: Mapping[str, Any]) -> Conversation:
    tools = {
        t["name"]: t.get("parameters") or {}
        for t in _list(body, "tools")
        if isinstance(t, Mapping) and t.get("type") == "function" and "name" in t
    }
    items = body.get("input")
    listed = items if isinstance(items, list) else []
    given = [item for item in listed if isinstance(item, Mapping)]
    outputs = [str(item.get("type", "")).endswith("call_output") for item in given]
    results = tuple(
        _text_of(item.get("output")) for item, output in zip(given, outputs, strict=True) if output
    )
    model, stream = str(body.get("model", "")), bool(body.get("stream"))
    ends = bool(outputs) and outputs[-1]
    return Conversation(tools, results, model, stream, ends_with_result=ends)


def _read_gemini(body: Mapping[str, Any], model: str, stream: bool) -> Conversation:
    tools = {}
    for tool in _list(body, "tools"):
        for declaration in (
            (tool.get("functionDeclarations") or []) if isinstance(tool, Mapping) else []
        ):
            schema = declaration.get("parametersJsonSchema") or declaration.get("parameters") or {}
            tools[declaration["name"]] = schema
    results: list[str] = []
    last: list[str] = []
    for content in _list(body, "contents"):
        last = [
            _text_of(part["functionResponse"].get("response"))
            for part in ((content.get("parts") or []) if isinstance(content, Mapping) else [])
            if isinstance(part, Mapping) and "functionResponse" in part
        ]
        results.extend(last)
    config = body.get("generationConfig")
    schema = None
    if isinstance(config, Mapping):
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
    return Conversation(tools, tuple(results), model, stream, schema, ends_with_result=bool(last))


def read_request(
    protocol: Protocol, body: Any, *, model: str = "", stream: bool = False
) -> Conversation:
    """Read a request body of ``protocol``. For ``gemini`` the model and streaming come
    from the URL (``models/{model}:streamGenerateContent``) and are passed in."""
    obj = _object(body)
    if protocol == "anthropic":
        return _read_anthropic(obj)
    if protocol == "chat":
        return _read_chat(obj)
    if protocol == "responses":
        return _read_responses(obj)
    return _read_gemini(obj, model, stream)


def schema_example(schema: Mapping[str, Any]) -> Any:
    """The simplest value that satisfies a JSON schema (first enum value, required
    properties filled in, numbers at their minimum); Gemini CLI asks for such answers
    (who speaks next, how complex a task is)."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if kind else None
    kind = str(kind).lower() if kind is not None else None
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        required = schema.get("required") or list(properties)
        return {name: schema_example(properties.get(name) or {}) for name in required}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return ""


# ---------------------------------------------------------------- writing answers


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _arguments(call: ToolCall) -> str:
    return _json(dict(call.arguments))


def _halves(text: str) -> list[str]:
    """Split JSON arguments in two, as providers stream them in pieces."""
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def _anthropic_stream(reply: Reply) -> list[SseEvent]:
    def event(kind: str, **data: Any) -> SseEvent:
        return SseEvent(_json({"type": kind, **data}), kind)

    events = [
        event(
            "message_start",
            message={
                "id": reply.message_id,
                "type": "message",
                "role": "assistant",
                "model": reply.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": reply.input_tokens, "output_tokens": 1},
            },
        )
    ]
    index = 0
    if reply.reasoning:
        events.append(
            event(
                "content_block_start",
                index=index,
                content_block={"type": "thinking", "thinking": "", "signature": ""},
            )
        )
        events.extend(
            event(
                "content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": t}
            )
            for t in reply.reasoning
        )
        events.append(
            event(
                "content_block_delta",
                index=index,
                delta={"type": "signature_delta", "signature": "c3RhbmQtaW4="},
            )
        )
        events.append(event("content_block_stop", index=index))
        index += 1
    if reply.text:
        events.append(
            event("content_block_start", index=index, content_block={"type": "text", "text": ""})
        )
        events.extend(
            event("content_block_delta", index=index, delta={"type": "text_delta", "text": t})
            for t in reply.text
        )
        events.append(event("content_block_stop", index=index))
        index += 1
    if reply.tool_call is not None:
        call = reply.tool_call
        events.append(
            event(
                "content_block_start",
                index=index,
                content_block={
                    "type": "tool_use",
                    "id": call.call_id,
                    "name": call.name,
                    "input": {},
                },
            )
        )
        events.extend(
            event(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": piece},
            )
            for piece in _halves(_arguments(call))
        )
        events.append(event("content_block_stop", index=index))
    stop = "tool_use" if reply.tool_call is not None else "end_turn"
    events.append(
        event(
            "message_delta",
            delta={"stop_reason": stop, "stop_sequence": None},
            usage={"output_tokens": reply.output},
        )
    )
    events.append(event("message_stop"))
    return events


def _anthropic_json(reply: Reply) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append(
            {"type": "thinking", "thinking": "".join(reply.reasoning), "signature": "c3RhbmQtaW4="}
        )
    if reply.text:
        content.append({"type": "text", "text": "".join(reply.text)})
    if reply.tool_call is not None:
        call = reply.tool_call
        content.append(
            {
                "type": "tool_use",
                "id": call.call_id,
                "name": call.name,
                "input": dict(call.arguments),
            }
        )
    return {
        "id": reply.message_id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": "tool_use" if reply.tool_call is not None else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output},
    }


def _usage_chat(reply: Reply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output,
        "total_tokens": reply.input_tokens + reply.output,
    }


def _chat_stream(reply: Reply) -> list[SseEvent]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> SseEvent:
        return SseEvent(
            _json(
                {
                    "id": reply.message_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": reply.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
            )
        )

    events = [chunk({"role": "assistant", "content": ""})]
    events.extend(chunk({"reasoning_content": t}) for t in reply.reasoning)
    events.extend(chunk({"content": t}) for t in reply.text)
    if reply.tool_call is not None:
        call = reply.tool_call
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call.call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        events.extend(
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            for piece in _halves(_arguments(call))
        )
    events.append(chunk({}, "tool_calls" if reply.tool_call is not None else "stop"))
    events.append(
        SseEvent(
            _json(
                {
                    "id": reply.message_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": reply.model,
                    "choices": [],
                    "usage": _usage_chat(reply),
                }
            )
        )
    )
    events.append(SseEvent("[DONE]"))
    return events


def _chat_json(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.text) or None}
    if reply.reasoning:
        message["reasoning_content"] = "".join(reply.reasoning)
    if reply.tool_call is not None:
        call = reply.tool_call
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
        ]
    return {
        "id": reply.message_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_call is not None else "stop",
            }
        ],
        "usage": _usage_chat(reply),
    }


def _responses_items(reply: Reply) -> list[dict[str, Any]]:
    """The output items of a Responses answer, complete (as ``output_item.done`` has them)."""
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{reply.message_id}",
                "summary": [{"type": "summary_text", "text": "".join(reply.reasoning)}],
            }
        )
    if reply.text:
        items.append(
            {
                "type": "message",
                "id": f"msg_{reply.message_id}",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "".join(reply.text), "annotations": []}
                ],
            }
        )
    if reply.tool_call is not None:
        call = reply.tool_call
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{reply.message_id}",
                "status": "completed",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": _arguments(call),
            }
        )
    return items


def _responses_object(reply: Reply, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": f"resp_{reply.message_id}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": reply.model,
        "output": output,
        "usage": {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.input_tokens + reply.output,
        },
    }


def _responses_stream(reply: Reply) -> list[SseEvent]:
    events: list[SseEvent] = []

    def event(kind: str, **data: Any) -> None:
        events.append(SseEvent(_json({"type": kind, "sequence_number": len(events), **data}), kind))

    event("response.created", response=_responses_object(reply, "in_progress", []))
    event("response.in_progress", response=_responses_object(reply, "in_progress", []))
    items = _responses_items(reply)
    for index, item in enumerate(items):
        item_id = item["id"]
        where = {"output_index": index, "item_id": item_id}
        if item["type"] == "reasoning":
            event("response.output_item.added", output_index=index, item={**item, "summary": []})
            part: dict[str, Any] = {"type": "summary_text", "text": ""}
            event("response.reasoning_summary_part.added", **where, summary_index=0, part=part)
            for text in reply.reasoning:
                event("response.reasoning_summary_text.delta", **where, summary_index=0, delta=text)
            summary = item["summary"][0]
            event(
                "response.reasoning_summary_text.done",
                **where,
                summary_index=0,
                text=summary["text"],
            )
            event("response.reasoning_summary_part.done", **where, summary_index=0, part=summary)
        elif item["type"] == "message":
            event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            event("response.content_part.added", **where, content_index=0, part=part)
            for text in reply.text:
                event("response.output_text.delta", **where, content_index=0, delta=text)
            done = item["content"][0]
            event("response.output_text.done", **where, content_index=0, text=done["text"])
            event("response.content_part.done", **where, content_index=0, part=done)
        else:
            event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in _halves(item["arguments"]):
                event("response.function_call_arguments.delta", **where, delta=piece)
            event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        event("response.output_item.done", output_index=index, item=item)
    event("response.completed", response=_responses_object(reply, "completed", items))
    return events


def _gemini_response(reply: Reply, parts: list[dict[str, Any]], last: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    response: dict[str, Any] = {"candidates": [candidate], "modelVersion": reply.model}
    if last:
        candidate["finishReason"] = "STOP"
        response["usageMetadata"] = {
            "promptTokenCount": reply.input_tokens,
            "candidatesTokenCount": reply.output,
            "totalTokenCount": reply.input_tokens + reply.output,
        }
    return response


def _gemini_parts(reply: Reply) -> list[list[dict[str, Any]]]:
    """The parts of each streamed response, in order (one list per SSE event)."""
    parts: list[list[dict[str, Any]]] = [[{"text": t, "thought": True}] for t in reply.reasoning]
    if reply.tool_call is not None:
        call = reply.tool_call
        parts.append(
            [
                {
                    "functionCall": {
                        "id": call.call_id,
                        "name": call.name,
                        "args": dict(call.arguments),
                    }
                }
            ]
        )
    parts.extend([{"text": t}] for t in reply.text)
    return parts or [[{"text": ""}]]


def _gemini_stream(reply: Reply) -> list[SseEvent]:
    parts = _gemini_parts(reply)
    return [
        SseEvent(_json(_gemini_response(reply, p, i == len(parts) - 1)))
        for i, p in enumerate(parts)
    ]


def _gemini_json(reply: Reply) -> dict[str, Any]:
    whole = Reply(
        reply.model,
        reasoning=("".join(reply.reasoning),) if reply.reasoning else (),
        text=("".join(reply.text),) if reply.text else (),
        tool_call=reply.tool_call,
        message_id=reply.message_id,
        input_tokens=reply.input_tokens,
        output_tokens=reply.output,
    )
    return _gemini_response(whole, [p for ps in _gemini_parts(whole) for p in ps], True)


def render_stream(protocol: Protocol, reply: Reply) -> list[SseEvent]:
    """The SSE events of ``reply`` streamed in ``protocol``."""
    if protocol == "anthropic":
        return _anthropic_stream(reply)
    if protocol == "chat":
        return _chat_stream(reply)
    if protocol == "responses":
        return _responses_stream(reply)
    return _gemini_stream(reply)


def render_json(protocol: Protocol, reply: Reply) -> dict[str, Any]:
    """The body of ``reply`` answered without streaming in ``protocol``."""
    if protocol == "anthropic":
        return _anthropic_json(reply)
    if protocol == "chat":
        return _chat_json(reply)
    if protocol == "responses":
        return _responses_object(reply, "completed", _responses_items(reply))
    return _gemini_json(reply)


_COMMAND_WAIT_MS = 120_000
"""How long a shell tool that returns a running command's output so far (Codex's
``exec_command``, ``yield_time_ms``) is asked to wait for it to end."""


def shell_arguments(schema: Mapping[str, Any], command: str) -> dict[str, Any]:
    """The arguments of a shell tool with JSON ``schema`` that run ``command``: ``command``
    as a string or as ``["bash", "-lc", command]`` where the schema wants an array,
    or ``cmd``; a required ``description`` gets one, and a ``yield_time_ms`` the
    command's whole time."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    key = "cmd" if "cmd" in properties and "command" not in properties else "command"
    wanted = properties.get(key) or {}
    value: Any = ["bash", "-lc", command] if wanted.get("type") == "array" else command
    arguments: dict[str, Any] = {key: value}
    required: Sequence[str] = schema.get("required") or ()
    if "description" in required or "description" in properties:
        arguments["description"] = "Run the command"
    if "yield_time_ms" in properties:  # Codex: wait for the command's end, not 10 s
        arguments["yield_time_ms"] = _COMMAND_WAIT_MS
    return arguments
