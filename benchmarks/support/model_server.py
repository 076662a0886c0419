"""A stand-in model provider on a loopback port, for the real agent programs to talk to.

It speaks the providers' real HTTP APIs (:mod:`.model_wire`): Anthropic Messages
(``POST /v1/messages``, ``/v1/messages/count_tokens``, ``GET /v1/models``), OpenAI Chat
Completions (``POST /v1/chat/completions``), OpenAI Responses (``POST /v1/responses``),
Gemini (``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``,
``:generateContent``, ``:countTokens``, ``GET /v1beta/models``), streaming or not as asked.
Routes also answer under any path prefix (a base URL ending ``/v1`` or ``/api``).

It scripts the model (:class:`ModelScript`): while the conversation holds no tool result,
one call of the agent's own shell tool (found in the request's tool list) running
``command``; once a tool result is in, the final text in chunks, optionally reasoning
first. A request offering no shell tool (title generation, a structured question) gets
the final text, or a value of the JSON schema asked for. Every request is recorded
(:attr:`ModelServer.requests`) so a test can check what reached the model.

``failure`` makes each generation request fail: ``"status-500"`` answers 500,
``"drop"`` closes the connection after the first events, ``"stall"`` sends the first
events then nothing until the server stops. Stopping the server (cancelling its
nursery) ends stalled streams. A body that is not JSON gets 400.

::

    server = await start_model_server(nursery, ModelScript(command="echo hi"))
    env = {"ANTHROPIC_BASE_URL": server.url, "OPENAI_BASE_URL": server.url + "/v1", ...}

By hand: ``python -m benchmarks.support.model_server --port 8765 --command 'ls'``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

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
    "ModelScript",
    "ModelServer",
    "RecordedRequest",
    "main",
    "start_model_server",
]

Failure = Literal["status-500", "drop", "stall"]

# How many events a dropped or stalled stream sends before it fails (fewer if the
# answer has no more: the last event is never sent).
_EVENTS_BEFORE_FAILURE = 2


@dataclass
class ModelScript:
    """What the stand-in model answers: the shell ``command`` to call first, then the
    final ``text`` in these chunks (after ``reasoning`` chunks, if any); ``failure``
    makes every generation request fail that way instead."""

    command: str = "echo stand-in"
    text: tuple[str, ...] = ("The command ", "ran ", "fine.")
    reasoning: tuple[str, ...] = ()
    failure: Failure | None = None


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


class _DroppedConnection(Exception):
    """Raised inside a streaming body so that Hypercorn closes the connection mid-stream."""


class ModelServer:
    """The stand-in provider's state: its :class:`ModelScript` (change it between
    turns), the requests recorded, and ``url`` once started (no trailing slash)."""

    def __init__(self, script: ModelScript | None = None, *, echo: bool = False) -> None:
        self.script = script or ModelScript()
        self.requests: list[RecordedRequest] = []
        self.url = ""
        self.echo = echo
        self._ids = itertools.count(1)

    # -------------------------------------------------------------- what tests read

    def generations(self) -> list[RecordedRequest]:
        """The generation requests received (those read as a conversation)."""
        return [r for r in self.requests if r.conversation is not None]

    def tool_results(self) -> list[str]:
        """Every tool result text that reached the model, in the order received."""
        seen: list[str] = []
        for recorded in self.generations():
            assert recorded.conversation is not None
            seen.extend(r for r in recorded.conversation.tool_results if r not in seen)
        return seen

    # -------------------------------------------------------------- the model

    def reply_to(self, conversation: Conversation) -> Reply:
        """The scripted answer to ``conversation``."""
        number = next(self._ids)
        model = conversation.model or "stand-in"
        shell = conversation.shell_tool()
        message_id = f"stand_in_{number}"
        if conversation.response_schema is not None:
            answer = json.dumps(schema_example(conversation.response_schema))
            return Reply(model, text=(answer,), message_id=message_id)
        if shell is not None and not conversation.tool_results:
            arguments = shell_arguments(conversation.tools[shell], self.script.command)
            call = ToolCall(f"call_stand_in_{number}", shell, arguments)
            return Reply(model, tool_call=call, message_id=message_id)
        return Reply(
            model, reasoning=self.script.reasoning, text=self.script.text, message_id=message_id
        )

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
        failure = self.script.failure
        if failure == "status-500":
            return _error(500, "api_error", "the stand-in model server was told to fail")
        reply = self.reply_to(conversation)
        if not conversation.stream:
            if failure is not None:
                return await self._fail_plain(failure)
            return _json(render_json(protocol, reply))
        events = render_stream(protocol, reply)
        response = Response(
            self._stream([e.encode() for e in events], failure),
            status=200,
            content_type="text/event-stream",
        )
        response.headers["Cache-Control"] = "no-cache"
        response.timeout = None
        return response

    async def _stream(self, events: list[bytes], failure: Failure | None) -> AsyncIterator[bytes]:
        cut = min(_EVENTS_BEFORE_FAILURE, len(events) - 1)
        for number, event in enumerate(events):
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
        self.requests.append(
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


def _error(status: int, kind: str, message: str) -> Response:
    """An error body every client reads: Anthropic's ``type``, OpenAI's ``error.type``,
    Gemini's ``error.code``/``status``."""
    body = {
        "type": "error",
        "error": {"type": kind, "message": message, "code": status, "status": kind.upper()},
    }
    return _json(body, status)


async def start_model_server(
    nursery: trio.Nursery, script: ModelScript | None = None, *, echo: bool = False
) -> ModelServer:
    """Start a :class:`ModelServer` on ``127.0.0.1:0`` in ``nursery``; return it."""
    server = ModelServer(script, echo=echo)
    server.url = await serve_app(nursery, server.app())
    return server


def main(argv: list[str] | None = None) -> None:
    """Serve the stand-in model until interrupted, printing each request to stderr."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.support.model_server")
    parser.add_argument("--port", type=int, default=0, help="loopback port (0: any free one)")
    parser.add_argument("--command", default=ModelScript.command, help="the shell command")
    parser.add_argument("--text", nargs="+", default=list(ModelScript.text), help="text chunks")
    parser.add_argument("--reasoning", nargs="*", default=[], help="reasoning chunks")
    parser.add_argument("--failure", choices=["status-500", "drop", "stall"], default=None)
    args = parser.parse_args(argv)
    script = ModelScript(args.command, tuple(args.text), tuple(args.reasoning), args.failure)

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            server = ModelServer(script, echo=True)
            server.url = await serve_app(nursery, server.app(), port=args.port)
            print(f"model: serving {server.url} (Ctrl-C to stop)", file=sys.stderr, flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        trio.run(serve)


if __name__ == "__main__":
    main()
