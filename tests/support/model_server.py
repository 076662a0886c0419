"""A scriptable OpenAI-compatible Chat Completions server for tests.

Each ``POST /v1/chat/completions`` takes the next item of the script::

    model = await start_model_server(nursery)
    model.add(
        tool_calls(("write_file", {"path": "output/a.txt", "content": "hi"})),
        reply("Wrote the file."),
    )
    env = {"OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": model.api_key, ...}

Script items: a completion body (:func:`reply`, :func:`tool_calls`, or any mapping),
:class:`HttpError`, :class:`Hang` (never answers: the client times out), :class:`Raw`
(arbitrary bytes), or a callable taking the request body and returning an item. An
exhausted script answers 500. Every request body is recorded in ``requests``; a
request without ``Authorization: Bearer <api_key>`` gets 401.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import msgspec
import trio
from quart import Response, request
from quart_trio import QuartTrio

from benchmarks.support.servers import serve_app

__all__ = [
    "Hang",
    "HttpError",
    "ModelServer",
    "Raw",
    "ScriptItem",
    "reply",
    "start_model_server",
    "tool_calls",
]

_ids = itertools.count(1)


@dataclass(frozen=True)
class HttpError:
    """Answer with this status and body."""

    status: int
    body: str = '{"error": {"message": "scripted failure"}}'


@dataclass(frozen=True)
class Hang:
    """Never answer (until the server stops)."""


@dataclass(frozen=True)
class Raw:
    """Answer 200 with these exact bytes."""

    body: bytes
    content_type: str = "application/json"


ScriptItem: TypeAlias = Mapping[str, Any] | HttpError | Hang | Raw | Callable[[dict[str, Any]], Any]


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
    """A final answer: an assistant message with no tool calls."""
    return _completion({"role": "assistant", "content": content}, "stop")


def tool_calls(*calls: tuple[str, Any], content: str | None = None) -> dict[str, Any]:
    """An answer calling tools: ``(name, args)`` pairs; a ``str`` args is sent verbatim
    (so tests can send malformed JSON), anything else is JSON-encoded."""
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
                        "arguments": args
                        if isinstance(args, str)
                        else msgspec.json.encode(args).decode(),
                    },
                }
                for name, args in calls
            ],
        },
        "tool_calls",
    )


@dataclass
class ModelServer:
    """The server's state: the script, the API key it expects and what it received."""

    api_key: str = "sk-test-key"
    script: deque[ScriptItem] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    @property
    def url(self) -> str:
        """The ``OPENAI_BASE_URL`` to use (ends in ``/v1``)."""
        if not self.base_url:
            raise RuntimeError("the model server is not started")
        return self.base_url + "/v1"

    def add(self, *items: ScriptItem) -> None:
        """Append answers to the script."""
        self.script.extend(items)

    def env(self, model: str = "test-model") -> dict[str, str]:
        """The ``/env`` vars that point the openai agent at this server."""
        return {"OPENAI_BASE_URL": self.url, "OPENAI_API_KEY": self.api_key, "OPENAI_MODEL": model}

    def app(self) -> QuartTrio:
        app = QuartTrio(__name__)

        @app.post("/v1/chat/completions")
        async def completions() -> Response:
            if request.headers.get("Authorization") != f"Bearer {self.api_key}":
                return _json({"error": {"message": "invalid api key"}}, 401)
            body = msgspec.json.decode(await request.get_data())
            self.requests.append(body)
            if not self.script:
                return _json({"error": {"message": "script exhausted"}}, 500)
            item: Any = self.script.popleft()
            if callable(item):
                item = item(body)
            if isinstance(item, Hang):
                await trio.sleep_forever()
            if isinstance(item, HttpError):
                return Response(item.body, status=item.status, content_type="application/json")
            if isinstance(item, Raw):
                return Response(item.body, status=200, content_type=item.content_type)
            return _json(item, 200)

        return app


def _json(value: Any, status: int) -> Response:
    return Response(msgspec.json.encode(value), status=status, content_type="application/json")


async def start_model_server(nursery: trio.Nursery, **options: Any) -> ModelServer:
    """Start a :class:`ModelServer` on ``127.0.0.1:0`` in ``nursery``; return it."""
    server = ModelServer(**options)
    server.base_url = await serve_app(nursery, server.app())
    return server
