"""A stand-in model provider on a loopback port, for the real agent programs to talk to.

It speaks the providers' real HTTP APIs (:mod:`.model_wire`): Anthropic Messages
(``POST /v1/messages``, ``/v1/messages/count_tokens``, ``GET /v1/models``), OpenAI Chat
Completions (``POST /v1/chat/completions``), OpenAI Responses (``POST /v1/responses``),
Gemini (``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``,
``:generateContent``, ``:countTokens``, ``GET /v1beta/models``), streaming or not as asked.
Routes also answer under any path prefix (a base URL ending ``/v1`` or ``/api``).

It scripts the model (:class:`ModelScript`): after what the user said, one call of the
agent's own shell tool (found in the request's tool list) running ``command``; after
its result, the final text in chunks, optionally reasoning first (so each turn of a
conversation calls the command once). A request offering no shell tool (title
generation, a structured question) gets the final text, or a value of the JSON schema
asked for. Explicit answers queued with :meth:`ModelServer.add` (:func:`reply`,
:func:`tool_calls`, :class:`HttpError`, :class:`Hang`, :class:`Raw`) go first; with no
script, an exhausted queue answers 500.
Every request is recorded (:attr:`ModelServer.received`) so a test can check what
reached the model; a wrong API key gets 401.

``failure`` makes each generation request fail: ``"status-500"`` answers 500,
``"drop"`` closes the connection after the first events, ``"stall"`` sends the first
events then nothing until the server stops. Stopping the server (cancelling its
nursery) ends stalled streams. A body that is not JSON gets 400.

::

    server = await start_model_server(nursery, ModelScript(command="echo hi"))
    env = server.provider_env("codex")   # what every acp preset reads, a model codex knows

By hand: ``.venv/bin/python -m benchmarks.support.model_server --port 8765 --command 'ls'``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

import trio
from quart import Response, request
from quart_trio import QuartTrio

from .model_wire import (
    Conversation,
    Protocol,
    Reply,
    ToolCall,
    WireError,
    read_request,
    render_json,
    render_stream,
    schema_example,
    shell_arguments,
)
from .servers import serve_app

__all__ = [
    "Failure",
    "Hang",
    "HttpError",
    "ModelScript",
    "ModelServer",
    "Raw",
    "RecordedRequest",
    "ScriptItem",
    "main",
    "reply",
    "start_model_server",
    "tool_calls",
]

Failure = Literal["status-500", "drop", "stall"]

AGENT_MODELS: Final[dict[str, str]] = {"codex": "gpt-5.3-codex", "claude": "claude-sonnet-4-5"}
"""Model names the agents know (Codex says so in the turn's text when it has no
metadata for one); the other presets take any name."""

# How many events a dropped or stalled stream sends before it fails (fewer if the
# answer has no more: the last event is never sent).
_EVENTS_BEFORE_FAILURE = 2


@dataclass
class ModelScript:
    """What the stand-in model answers: the shell ``command`` to call first, then the
    final ``text`` in these chunks (after ``reasoning`` chunks, if any); ``failure``
    makes every generation request fail that way instead. ``pace_sec``: the pause
    between two events of a streamed answer (as a model's tokens come). ``hold_at``: a
    streamed final answer (one after a tool result) stops before its first event holding
    this text until :meth:`ModelServer.release` (so a test sees the answer in part)."""

    command: str = "echo stand-in"
    text: tuple[str, ...] = ("The command ", "ran ", "fine.")
    reasoning: tuple[str, ...] = ()
    failure: Failure | None = None
    pace_sec: float = 0.0
    hold_at: str | None = None


@dataclass(frozen=True)
class RecordedRequest:
    """One request received: method, path (no query), protocol (``None`` for model
    lists and unknown routes), the JSON body (``None`` if none) and what was read."""

    method: str
    path: str
    protocol: Protocol | None
    body: Any
    conversation: Conversation | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HttpError:
    """An answer given in place of the next generation: this status and body."""

    status: int
    body: str = '{"error": {"message": "scripted failure"}}'


@dataclass(frozen=True)
class Hang:
    """An answer given in place of the next generation: none (until the server stops)."""


@dataclass(frozen=True)
class Raw:
    """An answer given in place of the next generation: 200 with these exact bytes."""

    body: bytes
    content_type: str = "application/json"


ScriptItem: TypeAlias = Mapping[str, Any] | HttpError | Hang | Raw | Callable[[dict[str, Any]], Any]
"""An explicit answer (:meth:`ModelServer.add`): a JSON body (:func:`reply`,
:func:`tool_calls`, any mapping), :class:`HttpError`, :class:`Hang`, :class:`Raw`, or a
callable taking the request body and returning one of those."""

_ids = itertools.count(1)


def _completion(message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def reply(content: str) -> dict[str, Any]:
    """A Chat Completions answer (not streamed): an assistant message, no tool calls."""
    return _completion({"role": "assistant", "content": content}, "stop")


def tool_calls(*calls: tuple[str, Any], content: str | None = None) -> dict[str, Any]:
    """A Chat Completions answer (not streamed) calling tools: ``(name, args)`` pairs; a
    ``str`` args is sent verbatim (so tests can send malformed JSON), anything else is
    JSON-encoded."""
    return _completion(
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {
                    "id": f"call_{next(_ids)}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
                for name, args in calls
            ],
        },
        "tool_calls",
    )


class _DroppedConnection(Exception):
    """Raised inside a streaming body so that Hypercorn closes the connection mid-stream."""


class ModelServer:
    """The stand-in provider's state.

    ``script``: the scripted model (change it between turns); ``None`` answers only
    what :meth:`add` queued (500 once exhausted). Queued answers go first either way.
    ``api_key``: the key every generation and token count must carry (``None``: no
    check), as ``Authorization: Bearer``, ``x-api-key`` or ``x-goog-api-key``; 401
    otherwise. ``requests``: the bodies of the generation requests let in;
    ``received``: every request. ``base_url`` once started (no trailing slash).
    """

    def __init__(
        self,
        script: ModelScript | None = None,
        *,
        api_key: str | None = "sk-test-key",
        echo: bool = False,
    ) -> None:
        self.script = script
        self.api_key = api_key
        self.answers: deque[ScriptItem] = deque()
        self.requests: list[dict[str, Any]] = []
        self.received: list[RecordedRequest] = []
        self.replies: list[Reply] = []
        """The answers given to generation requests, in order (their token counts are
        the usage the answers reported)."""
        self.base_url = ""
        self.echo = echo
        self._ids = itertools.count(1)
        self._released = trio.Event()

    def release(self) -> None:
        """Let held answers (:attr:`ModelScript.hold_at`) go on, now and from now on."""
        self._released.set()

    @property
    def url(self) -> str:
        """The OpenAI base URL (``OPENAI_BASE_URL``: ends in ``/v1``)."""
        if not self.base_url:
            raise RuntimeError("the model server is not started")
        return self.base_url + "/v1"

    def add(self, *items: ScriptItem) -> None:
        """Queue explicit answers for the next generation requests."""
        self.answers.extend(items)

    def env(self, model: str = "test-model") -> dict[str, str]:
        """The variables that point an OpenAI-compatible client at this server."""
        return {
            "OPENAI_BASE_URL": self.url,
            "OPENAI_API_KEY": self.api_key or "unused",
            "OPENAI_MODEL": model,
        }

    def provider_env(self, preset: str | None = None) -> dict[str, str]:
        """The variables every acp preset reads, all pointing at this server, with a
        model name ``preset``'s agent knows (:data:`AGENT_MODELS`)."""
        key = self.api_key or "unused"
        return {
            **self.env(AGENT_MODELS.get(preset or "", "test-model")),
            "ANTHROPIC_BASE_URL": self.base_url,
            "ANTHROPIC_API_KEY": key,
            "GOOGLE_GEMINI_BASE_URL": self.base_url,
            "GEMINI_API_KEY": key,
        }

    # -------------------------------------------------------------- what tests read

    def generations(self) -> list[RecordedRequest]:
        """The generation requests received (those read as a conversation)."""
        return [r for r in self.received if r.conversation is not None]

    def tool_results(self) -> list[str]:
        """Every tool result text that reached the model, in the order received."""
        seen: list[str] = []
        for recorded in self.generations():
            assert recorded.conversation is not None
            seen.extend(r for r in recorded.conversation.tool_results if r not in seen)
        return seen

    # -------------------------------------------------------------- the model

    def reply_to(self, conversation: Conversation, script: ModelScript) -> Reply:
        """The scripted answer to ``conversation``."""
        number = next(self._ids)
        model = conversation.model or "stand-in"
        shell = conversation.shell_tool()
        message_id = f"stand_in_{number}"
        if conversation.response_schema is not None:
            answer = json.dumps(schema_example(conversation.response_schema))
            return Reply(model, text=(answer,), message_id=message_id)
        if shell is not None and not conversation.ends_with_result:
            arguments = shell_arguments(conversation.tools[shell], script.command)
            call = ToolCall(f"call_stand_in_{number}", shell, arguments)
            return Reply(model, tool_call=call, message_id=message_id)
        return Reply(model, reasoning=script.reasoning, text=script.text, message_id=message_id)

    # -------------------------------------------------------------- HTTP

    def app(self) -> QuartTrio:
        app = QuartTrio(__name__)

        @app.route("/<path:path>", methods=["GET", "POST"])
        async def route(path: str) -> Response:
            return await self._route("/" + path)

        return app

    async def _route(self, path: str) -> Response:
        raw = await request.get_data()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._record(path, None, None)
            return _error(400, "invalid_request_error", "the request body is not JSON")
        headers = {k.lower(): v for k, v in request.headers.items()}
        if request.method == "GET":
            self._record(path, None, body, headers=headers)
            return self._models(path, headers)
        protocol, model, stream, counting = _protocol_of(path)
        if protocol is None:
            self._record(path, None, body, headers=headers)
            return _error(404, "not_found_error", f"no such route: POST {path}")
        if not self._authorized(headers):
            self._record(path, protocol, body, headers=headers)
            return _error(401, "authentication_error", "invalid api key")
        if counting:
            self._record(path, protocol, body, headers=headers)
            if protocol == "gemini":
                return _json({"totalTokens": 10})
            return _json({"input_tokens": 10})
        try:
            conversation = read_request(protocol, body, model=model, stream=stream)
        except WireError as error:
            self._record(path, protocol, body, headers=headers)
            return _error(400, "invalid_request_error", str(error))
        self._record(path, protocol, body, conversation, headers)
        self.requests.append(body if isinstance(body, dict) else {})
        if self.answers:
            return await self._answer(self.answers.popleft(), body)
        script = self.script
        if script is None:
            return _error(500, "api_error", "script exhausted")
        failure = script.failure
        if failure == "status-500":
            return _error(500, "api_error", "the stand-in model server was told to fail")
        reply = self.reply_to(conversation, script)
        self.replies.append(reply)
        if not conversation.stream:
            if failure is not None:
                return await self._fail_plain(failure)
            return _json(render_json(protocol, reply))
        events = [e.encode() for e in render_stream(protocol, reply)]
        hold = _held_event(events, script.hold_at) if conversation.ends_with_result else None
        response = Response(
            self._stream(events, failure, script.pace_sec, hold),
            status=200,
            content_type="text/event-stream",
        )
        response.headers["Cache-Control"] = "no-cache"
        response.timeout = None
        return response

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        if self.api_key is None:
            return True
        given = {
            headers.get("authorization", "").removeprefix("Bearer "),
            headers.get("x-api-key"),
            headers.get("x-goog-api-key"),
            request.args.get("key"),
        }
        return self.api_key in given

    async def _answer(self, item: ScriptItem, body: Any) -> Response:
        if callable(item):
            item = item(body)
        if isinstance(item, Hang):
            await trio.sleep_forever()
        if isinstance(item, HttpError):
            return Response(item.body, status=item.status, content_type="application/json")
        if isinstance(item, Raw):
            return Response(item.body, status=200, content_type=item.content_type)
        return _json(item)

    async def _stream(
        self, events: list[bytes], failure: Failure | None, pace: float, hold: int | None
    ) -> AsyncIterator[bytes]:
        cut = min(_EVENTS_BEFORE_FAILURE, len(events) - 1)
        for number, event in enumerate(events):
            if pace and number:
                await trio.sleep(pace)
            if number == hold:
                await self._released.wait()
            if failure is not None and number == cut:
                if failure == "stall":
                    await trio.sleep_forever()
                raise _DroppedConnection("the stand-in model server dropped the stream")
            yield event

    async def _fail_plain(self, failure: Failure) -> Response:
        if failure == "stall":
            await trio.sleep_forever()
        raise _DroppedConnection("the stand-in model server dropped the connection")

    def _models(self, path: str, headers: dict[str, str]) -> Response:
        if path.rstrip("/").endswith("/models") and "v1beta" in path:
            return _json({"models": [_gemini_model("gemini-2.5-pro")]})
        if "/models/" in path and "v1beta" in path:
            return _json(_gemini_model(path.rsplit("/", 1)[-1]))
        if path.rstrip("/").endswith("/models"):
            if "anthropic-version" in headers:
                model = {"type": "model", "id": "claude-stand-in", "display_name": "Stand-in"}
                return _json(
                    {
                        "data": [model],
                        "has_more": False,
                        "first_id": model["id"],
                        "last_id": model["id"],
                    }
                )
            return _json(
                {
                    "object": "list",
                    "data": [{"id": "stand-in", "object": "model", "owned_by": "local"}],
                }
            )
        return _error(404, "not_found_error", f"no such route: GET {path}")

    def _record(
        self,
        path: str,
        protocol: Protocol | None,
        body: Any,
        conversation: Conversation | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.received.append(
            RecordedRequest(request.method, path, protocol, body, conversation, headers or {})
        )
        if self.echo:
            what = ""
            if conversation is not None:
                what = f" tools={list(conversation.tools)} results={len(conversation.tool_results)}"
            print(f"model: {request.method} {path}{what}", file=sys.stderr, flush=True)


def _protocol_of(path: str) -> tuple[Protocol | None, str, bool, bool]:
    """(protocol, model, streaming, token count) of a POST path; the model and the
    streaming flag come from the path for Gemini only."""
    if path.endswith("/messages/count_tokens"):
        return "anthropic", "", False, True
    if path.endswith("/messages"):
        return "anthropic", "", False, False
    if path.endswith("/chat/completions"):
        return "chat", "", False, False
    if path.endswith("/responses"):
        return "responses", "", False, False
    if "/models/" in path and ":" in path:
        model, _, method = path.rsplit("/", 1)[-1].partition(":")
        if method == "countTokens":
            return "gemini", model, False, True
        if method in ("streamGenerateContent", "generateContent"):
            return "gemini", model, method == "streamGenerateContent", False
    return None, "", False, False


def _gemini_model(name: str) -> dict[str, Any]:
    return {
        "name": f"models/{name}",
        "displayName": name,
        "inputTokenLimit": 1_000_000,
        "outputTokenLimit": 65_536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
    }


def _json(value: Any, status: int = 200) -> Response:
    return Response(json.dumps(value), status=status, content_type="application/json")


def _held_event(events: list[bytes], text: str | None) -> int | None:
    """The index of the first of ``events`` carrying ``text`` (JSON-encoded), if any."""
    if text is None:
        return None
    needle = json.dumps(text)[1:-1].encode()
    return next((number for number, event in enumerate(events) if needle in event), None)


def _error(status: int, kind: str, message: str) -> Response:
    """An error body every client reads: Anthropic's ``type``, OpenAI's ``error.type``,
    Gemini's ``error.code``/``status``."""
    body = {
        "type": "error",
        "error": {"type": kind, "message": message, "code": status, "status": kind.upper()},
    }
    return _json(body, status)


async def start_model_server(
    nursery: trio.Nursery, script: ModelScript | None = None, **options: Any
) -> ModelServer:
    """Start a :class:`ModelServer` on ``127.0.0.1:0`` in ``nursery``; return it."""
    server = ModelServer(script, **options)
    server.base_url = await serve_app(nursery, server.app())
    return server


def main(argv: list[str] | None = None) -> None:
    """Serve the stand-in model until interrupted, printing each request to stderr."""
    parser = argparse.ArgumentParser(prog=".venv/bin/python -m benchmarks.support.model_server")
    parser.add_argument("--port", type=int, default=0, help="loopback port (0: any free one)")
    parser.add_argument("--command", default=ModelScript.command, help="the shell command")
    parser.add_argument("--text", nargs="+", default=list(ModelScript.text), help="text chunks")
    parser.add_argument("--reasoning", nargs="*", default=[], help="reasoning chunks")
    parser.add_argument("--failure", choices=["status-500", "drop", "stall"], default=None)
    parser.add_argument("--api-key", default=None, help="the key to require (default: none)")
    args = parser.parse_args(argv)
    script = ModelScript(args.command, tuple(args.text), tuple(args.reasoning), args.failure)

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            server = ModelServer(script, api_key=args.api_key, echo=True)
            server.base_url = await serve_app(nursery, server.app(), port=args.port)
            print(f"model: serving {server.base_url} (Ctrl-C to stop)", file=sys.stderr, flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        trio.run(serve)


if __name__ == "__main__":
    main()
