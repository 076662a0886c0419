"""The OpenAPI description: every route of the runner's and the chat's apps described
(nothing more), the document valid OpenAPI 3.1, and real requests and answers over
real sockets valid against it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from quart_trio import QuartTrio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.server.chat.api import CHAT_OPERATIONS
from sandstream.server.http import (
    HTTP_OPERATIONS,
    Operations,
    UndescribedRouteError,
    described_methods,
    openapi_document,
    route_template,
)
from sandstream.server.runner import RUNNER_OPERATIONS
from sandstream.server.sessions import SESSIONS_OPERATIONS
from sandstream.server.streams import STREAMS_OPERATIONS
from sandstream.server.web import WEB_OPERATIONS
from tests.chat.harness import AUTH as CHAT_AUTH
from tests.chat.harness import start_chat_server
from tests.server.harness import AUTH as RUNNER_AUTH
from tests.server.harness import RunnerServer, load
from tests.sessions.harness import start_sessions, wait_state

ALL_OPERATIONS: Operations = {
    **HTTP_OPERATIONS,
    **RUNNER_OPERATIONS,
    **SESSIONS_OPERATIONS,
    **STREAMS_OPERATIONS,
    **CHAT_OPERATIONS,
    **WEB_OPERATIONS,
}
WORKSPACE = "w1"


@dataclass
class Servers:
    runner: RunnerServer
    apps: dict[str, QuartTrio]
    urls: dict[str, str]


async def start_all(nursery: trio.Nursery, tmp_path: Path) -> Servers:
    """A runner with sessions, a chat with an embedded runner, and a chat on that
    runner (remote: it serves its own ``/healthz``)."""
    runner = await start_sessions(nursery, tmp_path / "runner")
    embedded = await start_chat_server(nursery, tmp_path / "embedded")
    remote = await start_chat_server(
        nursery, tmp_path / "remote", embedded=False, sandbox_url=runner.url
    )
    assert embedded.app is not None and remote.app is not None
    return Servers(
        runner,
        {"runner": runner.app, "embedded": embedded.app, "remote": remote.app},
        {"runner": runner.url, "embedded": embedded.url, "remote": remote.url},
    )


def rule_keys(app: QuartTrio) -> set[tuple[str, str]]:
    return {
        (rule.endpoint, method)
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in described_methods(rule, ALL_OPERATIONS)
    }


async def test_every_route_is_described_and_nothing_else(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    servers = await start_all(nursery, tmp_path)
    routes: set[tuple[str, str]] = set()
    for app in servers.apps.values():
        routes |= rule_keys(app)
        for key in rule_keys(app) - {("streams.stream_route", "HEAD")}:
            lacking = {k: v for k, v in ALL_OPERATIONS.items() if k != key}
            with pytest.raises(UndescribedRouteError):
                openapi_document(app, lacking, title="t", version="0")
    assert routes == set(ALL_OPERATIONS)
    assert ("streams.stream_route", "HEAD") in routes
    assert ("sessions.session_ws", "GET") in routes
    await shut_down(servers)


async def shut_down(servers: Servers) -> None:
    await servers.runner.shutdown()


async def test_the_served_documents_are_valid_openapi_31(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    servers = await start_all(nursery, tmp_path)
    for name, url in servers.urls.items():
        async with httpx.AsyncClient(base_url=url) as client:
            response = await client.get("/openapi.json")
            page = await client.get("/docs")
        assert response.status_code == 200, name
        document = response.json()
        assert document["openapi"] == "3.1.0"
        validate(document)
        app = servers.apps[name]
        described = {
            (path, method.upper()) for path, item in document["paths"].items() for method in item
        }
        expected = {
            (route_template(rule.rule), method)
            for rule in app.url_map.iter_rules()
            if rule.endpoint != "static"
            for method in described_methods(rule, ALL_OPERATIONS)
        }
        assert described == expected
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert b"openapi.json" in page.content
        assert b"<script src=" not in page.content
    await shut_down(servers)


# -- recorded requests and answers ---------------------------------------------------------


@dataclass
class Exchange:
    """One request and its answer as they crossed the socket."""

    method: str
    path: str
    request_type: str
    request_body: bytes
    status: int
    content_type: str
    body: bytes


class Recorder:
    """Every exchange of the clients it hooks, in order."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    async def __call__(self, response: httpx.Response) -> None:
        await response.aread()
        request = response.request
        self.exchanges.append(
            Exchange(
                request.method,
                request.url.path,
                request.headers.get("content-type", ""),
                request.content,
                response.status_code,
                response.headers.get("content-type", ""),
                response.content,
            )
        )

    def client(self, url: str, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=url, headers=headers, timeout=30, event_hooks={"response": [self]}
        )


def media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


def check_schema(document: dict[str, Any], schema: dict[str, Any], body: bytes) -> None:
    """``body`` (JSON) valid against ``schema``, its references into ``document``."""
    rooted = {**schema, "components": document["components"]}
    Draft202012Validator(rooted).validate(msgspec.json.decode(body))


def check_exchange(document: dict[str, Any], app: QuartTrio, exchange: Exchange) -> None:
    """The answer's status and media type are described for its route, and JSON bodies
    (the request's too) are valid against their schemas."""
    adapter = app.url_map.bind("localhost")
    rule, _ = adapter.match(exchange.path, method=exchange.method, return_rule=True)
    item = document["paths"][route_template(rule.rule)]
    operation = item.get(exchange.method.lower()) or item["get"]
    where = f"{exchange.method} {exchange.path} → {exchange.status}"
    answer = operation["responses"].get(str(exchange.status))
    assert answer is not None, f"{where}: status not described"
    if exchange.body or "content" in answer:
        kinds = {media_type(kind): kind for kind in answer["content"]}
        kind = media_type(exchange.content_type)
        assert kind in kinds or "*/*" in kinds, f"{where}: {kind} not in {list(kinds)}"
        schema = answer["content"][kinds.get(kind, "*/*")]["schema"]
        if kind == "application/json" or kind.endswith("+json"):
            check_schema(document, schema, exchange.body)
    if exchange.request_body and media_type(exchange.request_type) == "application/json":
        if exchange.status == 422:
            return  # the body sent was wrong on purpose
        request_schema = operation["requestBody"]["content"]["application/json"]["schema"]
        check_schema(document, request_schema, exchange.request_body)


def statuses(exchanges: list[Exchange]) -> Iterator[tuple[str, int]]:
    for exchange in exchanges:
        yield exchange.path, exchange.status


async def record_runner(
    recorder: Recorder, server: RunnerServer, workspace: WorkspaceServer
) -> None:
    """Sessions, Durable Streams, health, metrics and errors on a real runner."""
    workspace.config = load(5, payload_bytes=16)
    async with recorder.client(server.url, RUNNER_AUTH) as client:
        await client.get("/healthz")
        created = await client.post("/sessions", json=workspace.mint_dispatch("go"))
        session = created.json()["id"]
        await wait_state(client, session, "completed")
        await client.get(f"/sessions/{session}/status")
        await client.get(f"/sessions/{session}/stream", params={"cursor": "0"})
        await client.post(f"/sessions/{session}/message", json={"text": "late"})
        await client.post(f"/sessions/{session}/interrupt")
        await client.get("/sessions/ses_none/status")
        await client.post("/sessions", json={"nothing": True})
        await client.put("/v1/stream/doc", content=b"a", headers={"Content-Type": "text/plain"})
        await client.post("/v1/stream/doc", content=b"b", headers={"Content-Type": "text/plain"})
        await client.get("/v1/stream/doc", params={"offset": "-1"})
        await client.head("/v1/stream/doc")
        await client.delete("/v1/stream/doc")
        await client.get("/v1/stream/doc", params={"offset": "-1"})
        await client.get("/metrics")
    async with recorder.client(server.url) as anonymous:
        await anonymous.get("/metrics")
        await anonymous.get("/sessions/ses_none/status")


async def record_chat(recorder: Recorder, url: str) -> None:
    """The Assistant API, environments, push, callbacks, health and the web app."""
    query = {"workspaceId": WORKSPACE}
    async with recorder.client(url, CHAT_AUTH) as client:
        await client.get("/healthz")
        await client.get("/readyz")
        await client.get("/api/sandbox/healthz")
        created = await client.post("/api/assistant/chats", json={"workspaceId": WORKSPACE})
        chat = f"/api/assistant/chats/{created.json()['id']}"
        await client.get("/api/assistant/chats", params=query)
        await client.get(chat, params=query)
        for part in ("files", "grants", "workspace"):
            await client.get(f"{chat}/{part}", params=query)
        await client.post(f"{chat}/stream-token", params=query)
        await client.get(f"{chat}/stream", params=query)
        await client.post(f"{chat}/interrupt", params=query)
        await client.post(f"{chat}/messages", json={"workspaceId": WORKSPACE, "message": "hi"})
        environment = {"workspaceId": WORKSPACE, "vars": {"A": "1"}}
        await client.put("/api/workflows/wf1/environment", json=environment)
        await client.get("/api/workflows/wf1/environment", params=query)
        await client.get("/api/workflows/wf2/environment", params=query)
        await client.get("/api/assistant/push/vapid-public-key")
        await client.get("/api/assistant/push/subscriptions", params=query)
        await client.delete(chat, params=query)
        await client.get(chat, params=query)
        await client.post("/api/assistant/chats", json={"workspace": 1})
        await client.get("/api/sandbox/ses_none/env")
        await client.get("/")
        await client.get("/web/none.js")
        await client.get("/metrics")
    async with recorder.client(url) as anonymous:
        await anonymous.get("/api/assistant/chats", params=query)


async def test_recorded_requests_and_answers_match_the_description(
    nursery: trio.Nursery, tmp_path: Path, workspace: WorkspaceServer
) -> None:
    servers = await start_all(nursery, tmp_path)
    checked: dict[str, list[Exchange]] = {}
    for name in ("runner", "embedded", "remote"):
        recorder = Recorder()
        if name == "runner":
            await record_runner(recorder, servers.runner, workspace)
        else:
            await record_chat(recorder, servers.urls[name])
        async with httpx.AsyncClient(base_url=servers.urls[name]) as client:
            document = (await client.get("/openapi.json")).json()
        for exchange in recorder.exchanges:
            check_exchange(document, servers.apps[name], exchange)
        checked[name] = recorder.exchanges
    runner = dict(statuses(checked["runner"]))
    assert runner["/sessions"] == 422 and runner["/metrics"] == 401
    chat = set(statuses(checked["embedded"]))
    assert ("/api/assistant/chats", 201) in chat and ("/api/assistant/chats", 401) in chat
    assert ("/web/none.js", 404) in chat
    await shut_down(servers)
