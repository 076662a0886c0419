"""The ``openai`` agent: an OpenAI-compatible Chat Completions tool-calling loop.

Each iteration POSTs ``{base}/chat/completions`` with the conversation and the skills as
``tools``; each tool call runs as a step; an answer without tool calls is the final
message, unless user messages arrived meanwhile (:mod:`..inbox`). Configuration:
``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_MODEL`` (docs/protocol.md).

Errors: :class:`~..errors.ModelTimeoutError` (``model_timeout``),
:class:`~..errors.ModelError` (``model_error``: unreachable, non-2xx, unusable body),
:class:`~..errors.AgentError` (``max_iterations``). Garbled tool arguments become a
failed step reported back to the model. Cancellation propagates after the running step
is closed as failed.
"""

from __future__ import annotations

from typing import Any, Final

import httpx
import msgspec

from sandstream.core import JSONInputError, OpenAIAgent, decode_json

from ..attachments import attachments_note
from ..context import RunContext
from ..errors import AgentError, ConfigError, ModelError, ModelTimeoutError
from ..http import HttpSettings, body_excerpt, send_with_retries
from ..output import new_step_id

__all__ = ["DEFAULT_BASE_URL", "run_openai"]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
_MAX_TOOL_MESSAGE_CHARS: Final = 100_000


class _Function(msgspec.Struct):
    name: str = ""
    arguments: Any = None


class _ToolCall(msgspec.Struct):
    function: _Function
    id: str | None = None
    type: str = "function"


class _Message(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _Completion(msgspec.Struct):
    choices: list[_Choice]


def _initial_messages(ctx: RunContext) -> list[dict[str, Any]]:
    system = ctx.config.system_prompt
    note = (
        f"You work in {ctx.work_dir}. Files you write under output/ are returned to "
        "the user at the end of the run."
    )
    attached = attachments_note(ctx.config.attachments)
    if attached:
        note = f"{note} {attached}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"{system}\n\n{note}" if system else note}
    ]
    messages += [{"role": turn.role, "content": turn.content} for turn in ctx.conversation]
    messages.append({"role": "user", "content": ctx.prompt})
    return messages


def _parse_arguments(raw: Any) -> tuple[Any, str | None]:
    """Return ``(args, error)``: args as an object, or the raw value and an error."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return raw, f"malformed tool arguments: expected a JSON object, got {raw!r:.200}"
    try:
        args = decode_json(raw)
    except JSONInputError as exc:
        return raw, f"malformed tool arguments (not JSON: {exc})"
    if not isinstance(args, dict):
        return raw, "malformed tool arguments: expected a JSON object"
    return args, None


def _tool_message_content(ok: bool, result: Any, error: str | None) -> str:
    payload = result if ok else {"error": error}
    text = msgspec.json.encode(payload).decode("utf-8", "replace")
    if len(text) > _MAX_TOOL_MESSAGE_CHARS:
        text = text[:_MAX_TOOL_MESSAGE_CHARS] + " …[truncated]"
    return text


class _Provider:
    def __init__(self, ctx: RunContext, spec: OpenAIAgent, client: httpx.AsyncClient) -> None:
        base = ctx.env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.url = base.rstrip("/") + "/chat/completions"
        model = ctx.config.model or ctx.env.get("OPENAI_MODEL")
        if not model:
            raise ConfigError("no model: set model in /config or OPENAI_MODEL in /env")
        self.model = model
        key = ctx.env.get("OPENAI_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.spec = spec
        self.client = client
        self.settings = HttpSettings(
            timeout=spec.request_timeout_sec,
            connect_retries=ctx.http.connect_retries,
            retry_backoff=ctx.http.retry_backoff,
        )

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> _Message:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if self.spec.temperature is not None:
            body["temperature"] = self.spec.temperature
        if self.spec.max_tokens is not None:
            body["max_tokens"] = self.spec.max_tokens
        content = msgspec.json.encode(body)
        headers = {**self.headers, "Content-Type": "application/json"}
        timeout = self.spec.request_timeout_sec
        try:
            response = await send_with_retries(
                self.client,
                self.settings,
                lambda: self.client.build_request(
                    "POST", self.url, content=content, headers=headers, timeout=timeout
                ),
            )
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout):
                raise ModelError("model provider unreachable (connect timed out)") from exc
            raise ModelTimeoutError(f"model provider timed out after {timeout:g}s") from exc
        except httpx.HTTPError as exc:
            raise ModelError(f"model provider unreachable: {exc!r}") from exc
        if not response.is_success:
            raise ModelError(
                f"model provider answered {response.status_code}: {body_excerpt(response)}"
            )
        try:
            completion = decode_json(response.content, _Completion)
        except JSONInputError as exc:
            raise ModelError(f"malformed completion from the model provider: {exc}") from exc
        if not completion.choices:
            raise ModelError("completion without choices from the model provider")
        return completion.choices[0].message


async def run_openai(ctx: RunContext) -> str:
    """Run the tool-calling loop; return the model's final message."""
    spec = ctx.config.agent
    assert isinstance(spec, OpenAIAgent)
    if ctx.config.mcp_servers:
        ctx.emitter.log("warn", "openai agent: MCP servers are not supported; ignored")
    tools = ctx.toolbox.openai_tools()
    async with httpx.AsyncClient(http2=False, follow_redirects=False) as client:
        provider = _Provider(ctx, spec, client)
        ctx.emitter.log("info", f"openai agent: model {provider.model}, {len(tools)} tool(s)")
        messages = _initial_messages(ctx)
        for _ in range(spec.max_iterations):
            messages += [{"role": "user", "content": text} for text in ctx.take_messages()]
            message = await provider.complete(messages, tools)
            if not message.tool_calls:
                if not ctx.inbox.pending:
                    return message.content or ""
                # A user message came in while the model answered: it gets a reply too.
                messages.append({"role": "assistant", "content": message.content or ""})
                continue
            calls = [
                (call, call.id or new_step_id().replace("step_", "call_"))
                for call in message.tool_calls
            ]
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments
                                if isinstance(call.function.arguments, str)
                                else msgspec.json.encode(call.function.arguments).decode(),
                            },
                        }
                        for call, call_id in calls
                    ],
                }
            )
            for call, call_id in calls:
                args, error = _parse_arguments(call.function.arguments)
                name = call.function.name or "(unnamed tool)"
                outcome = await ctx.toolbox.call(name, args, args_error=error)
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": _tool_message_content(outcome.ok, outcome.result, outcome.error),
                    }
                )
    raise AgentError(
        f"the model was still calling tools after {spec.max_iterations} iterations",
        code="max_iterations",
    )
