"""A turn's gateway credential: the stand-in provider gets the real key in its place;
a missing, altered, foreign or expired credential gets the provider's own 401 and
never reaches the provider."""

from __future__ import annotations

from typing import Any, Final

import httpx
import msgspec
import pytest
import trio

from benchmarks.support.model_server import ModelScript, ModelServer, reply, start_model_server
from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import ConfigResponse, Dispatch, OpenAIAgent
from sandstream.server import TurnStream
from tests.gateway.harness import REAL_KEY, open_turn, provider_dispatch, runner
from tests.server.harness import scripted, shell

CALLS: Final = {
    "anthropic": (
        "POST",
        "/anthropic/v1/messages",
        {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "openai": (
        "POST",
        "/openai/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ),
    "gemini": (
        "POST",
        "/gemini/v1beta/models/m:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
}


def _auth(provider: str, key: str) -> dict[str, str]:
    if provider == "anthropic":
        return {"x-api-key": key, "anthropic-version": "2023-06-01"}
    if provider == "gemini":
        return {"x-goog-api-key": key}
    return {"authorization": f"Bearer {key}"}


def _shape_of_401(provider: str, body: Any) -> bool:
    if provider == "anthropic":
        return bool(body["type"] == "error" and body["error"]["type"] == "authentication_error")
    if provider == "openai":
        error = body["error"]
        return bool(error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key")
    error = body["error"]
    return bool(error["code"] == 401 and error["status"] == "UNAUTHENTICATED" and error["message"])


async def _call(turn: TurnStream, provider: str, key: str | None) -> httpx.Response:
    assert turn.gateway is not None and turn.gateway.access is not None
    method, path, body = CALLS[provider]
    headers = {} if key is None else _auth(provider, key)
    async with httpx.AsyncClient(base_url=turn.gateway.access.url, timeout=30) as client:
        return await client.request(method, path, json=body, headers=headers)


@pytest.fixture
async def model(nursery: trio.Nursery) -> ModelServer:
    return await start_model_server(nursery, ModelScript(), api_key=REAL_KEY)


def _held(workspace: WorkspaceServer) -> None:
    workspace.config = scripted(shell("sleep 300"))


@pytest.mark.parametrize("provider", list(CALLS))
async def test_the_credential_is_swapped_for_the_real_key(
    workspace: WorkspaceServer, model: ModelServer, provider: str
) -> None:
    _held(workspace)
    async with open_turn(runner(), provider_dispatch(workspace, model)) as turn:
        assert turn.gateway is not None
        response = await _call(turn, provider, turn.gateway.credential)
        assert response.status_code == 200, response.text
    [recorded] = model.received
    presented = " ".join(recorded.headers.values())
    assert REAL_KEY in presented and turn.gateway.credential not in presented


@pytest.mark.parametrize("provider", list(CALLS))
async def test_a_missing_tampered_or_foreign_credential_gets_the_providers_401(
    workspace: WorkspaceServer, model: ModelServer, provider: str
) -> None:
    _held(workspace)
    the_runner = runner()
    async with (
        open_turn(the_runner, provider_dispatch(workspace, model)) as turn,
        open_turn(the_runner, provider_dispatch(workspace, model)) as other,
    ):
        assert turn.gateway is not None and other.gateway is not None
        credential = turn.gateway.credential
        tampered = credential[:-1] + ("A" if credential[-1] != "A" else "B")
        for key in (None, tampered, credential + "x", REAL_KEY, other.gateway.credential):
            response = await _call(turn, provider, key)
            assert response.status_code == 401, (key, response.text)
            assert _shape_of_401(provider, response.json()), response.text
        # the other turn's listener refuses this turn's credential, and its own works
        assert (await _call(other, provider, credential)).status_code == 401
        assert (await _call(other, provider, other.gateway.credential)).status_code == 200
    assert len(model.received) == 1


async def test_a_credential_is_refused_once_its_turn_ended(
    workspace: WorkspaceServer, model: ModelServer
) -> None:
    the_runner = runner()
    workspace.config = scripted()  # answers at once
    dispatch = provider_dispatch(workspace, model)
    async with open_turn(the_runner, dispatch) as ended:
        assert ended.gateway is not None
        lines = b"".join([chunk async for chunk in ended])
        assert b'"result"' in lines and ended.container_gone.is_set()
        old = ended.gateway.credential
        response = await _call(ended, "openai", old)  # its listener, still open
        assert response.status_code == 401 and _shape_of_401("openai", response.json())
    _held(workspace)
    async with open_turn(the_runner, provider_dispatch(workspace, model)) as later:
        response = await _call(later, "openai", old)
        assert response.status_code == 401 and _shape_of_401("openai", response.json())
    assert model.received == []


async def test_the_container_gets_the_gateway_and_never_the_keys(
    workspace: WorkspaceServer, model: ModelServer
) -> None:
    """The dispatch the container reads on stdin, as its agent's shell prints it."""
    workspace.config = scripted(shell("env"))
    dispatch = provider_dispatch(workspace, model)
    turn = runner().open_turn(dispatch)
    async with turn:
        body = b"".join([chunk async for chunk in turn])
    assert turn.gateway is not None and turn.gateway.access is not None
    assert REAL_KEY.encode() not in body
    credential = turn.gateway.credential.encode()
    for name in (b"OPENAI_API_KEY", b"ANTHROPIC_API_KEY", b"GEMINI_API_KEY", b"GOOGLE_API_KEY"):
        assert name + b"=" + credential in body
    assert b"OPENAI_BASE_URL=" + turn.gateway.access.url.encode() + b"/openai" in body


async def test_without_a_gateway_the_keys_go_to_the_container_as_today(
    workspace: WorkspaceServer, model: ModelServer
) -> None:
    workspace.config = scripted(shell("env"))
    turn = runner(model_gateway=False).open_turn(provider_dispatch(workspace, model))
    async with turn:
        body = b"".join([chunk async for chunk in turn])
    assert turn.gateway is None
    assert f"OPENAI_API_KEY={REAL_KEY}".encode() in body


def test_a_dispatch_with_providers_round_trips() -> None:
    dispatch = Dispatch(agent_url="http://x", otp_setup="a", otp_run="b", prompt="p")
    assert msgspec.json.decode(msgspec.json.encode(dispatch), type=Dispatch) == dispatch


async def test_the_openai_agent_kind_calls_through_the_gateway(
    workspace: WorkspaceServer, model: ModelServer
) -> None:
    model.add(reply("through the gateway"))
    workspace.config = ConfigResponse(agent=OpenAIAgent(), model="test-model")
    turn = runner().open_turn(provider_dispatch(workspace, model))
    async with turn:
        body = b"".join([chunk async for chunk in turn])
    assert b'"message":"through the gateway"' in body, body[-300:]
    [recorded] = model.generations()
    assert recorded.headers["authorization"] == f"Bearer {REAL_KEY}"
