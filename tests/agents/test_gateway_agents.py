"""The five real ACP agents through the runner's model gateway: a real ``sandstream
serve`` chat turn in a real bubblewrap sandbox on the sealed network, which reaches
nothing but its callbacks and its turn's gateway, and so the stand-in model server only
through the gateway.

The turn completes; the stand-in sees the real key, never the turn credential; and the
agent's own shell, searching its environment, every process's environment, its home,
its work dir and ``/tmp`` for the real key, finds nothing.
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec
import pytest
import trio

from benchmarks.support.model_server import ModelScript, ModelServer, start_model_server
from sandstream.core.schemas import AcpPreset
from sandstream.core.sse_parser import ServerSentEvent
from sandstream.server.gateway import CREDENTIAL_PREFIX
from tests.chat.harness import WORKSPACE, EventReader, ServeProcess, start_serve_process
from tests.support.agents import ASKING, PRESETS, acp_spec

DEADLINE: Final = 120.0
PARAMS: Final = {"workspaceId": WORKSPACE}


SEARCH: Final = """
import base64, os, sys
key = base64.b64decode(sys.argv[1])
found = key in b"\\0".join(f"{k}={v}".encode() for k, v in os.environ.items())
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        found = found or key in open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        pass
tops = {os.path.realpath(p) for p in (os.environ.get("HOME", "/tmp"), os.getcwd(), "/tmp")}
for top in [t for t in tops if not any(t.startswith(o + "/") for o in tops)]:
    for root, _, files in os.walk(top):
        for name in files:
            try:
                found = found or key in open(os.path.join(root, name), "rb").read()
            except OSError:
                pass
print("key-search:", "yes" if found else "no")
print("credential-in-env" if any(v.startswith(sys.argv[2]) for v in os.environ.values()) else "")
"""


def search_command(key: str) -> str:
    """A shell command printing ``key-search: no`` when ``key`` is nowhere the sandbox's
    processes can look (its environment, every process's, its home, its work dir and
    ``/tmp``; ``yes`` otherwise), and ``credential-in-env`` when the turn credential is in
    its environment. The key is in it only encoded, so its own traces do not match."""
    encoded = base64.b64encode(key.encode()).decode()
    script = base64.b64encode(SEARCH.encode()).decode()
    return (
        f"echo {script} | base64 -d > search.py && python3 search.py {encoded} {CREDENTIAL_PREFIX}"
    )


def _data(event: ServerSentEvent) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.json.decode(event.data)
    return data


def _pending(event: ServerSentEvent) -> bool:
    return event.event == "permission" and _data(event)["status"] == "pending"


async def chat_turn(
    client: httpx.AsyncClient, preset: AcpPreset, message: str
) -> list[ServerSentEvent]:
    """One chat turn to its end, answering ``once`` when asked; its events."""
    body = {"workspaceId": WORKSPACE, "message": message}
    async with client.stream("POST", "/api/assistant/chat/stream", json=body) as response:
        assert response.status_code == 200, await response.aread()
        reader = EventReader(response)
        chat_id = _data(await reader.until(lambda e: e.event == "start"))["chatId"]
        with trio.fail_after(DEADLINE):
            if preset in ASKING:
                asked = _data(await reader.until(lambda e: _pending(e) or e.event == "error"))
                assert "id" in asked, asked
                answer = await client.post(
                    f"/api/assistant/chats/{chat_id}/permissions/{asked['id']}",
                    params=PARAMS,
                    json={"reply": "once"},
                )
                assert answer.status_code == 200, answer.text
            await reader.until(lambda e: e.event == "done")
        with trio.fail_after(DEADLINE):
            while (
                "activeMessageId"
                in (await client.get(f"/api/assistant/chats/{chat_id}", params=PARAMS)).json()
            ):
                await trio.sleep(0.1)
    return reader.events


async def serve_without_model_access(
    nursery: trio.Nursery, tmp_path: Path, preset: AcpPreset, model: ModelServer, *extra: str
) -> tuple[ServeProcess, httpx.AsyncClient]:
    """``sandstream serve`` whose agent config holds the keys and base URLs of ``model``,
    its isolated sandboxes allowed nothing on the host (no ``--sandbox-allow``)."""
    config = {"agent": msgspec.to_builtins(acp_spec(preset, model))}
    data_dir = tmp_path / "data"
    served = await start_serve_process(nursery, data_dir, config, *extra)
    token = (data_dir / "api-token").read_text().strip()
    client = served.client(token)
    client.timeout = httpx.Timeout(DEADLINE)
    return served, client


@pytest.mark.parametrize("preset", PRESETS)
async def test_an_agent_calls_its_model_through_the_gateway_and_never_sees_the_key(
    nursery: trio.Nursery, tmp_path: Path, preset: AcpPreset
) -> None:
    key = f"sk-real-{secrets.token_hex(12)}"
    model = await start_model_server(nursery, ModelScript(command=search_command(key)), api_key=key)
    served, client = await serve_without_model_access(
        nursery, tmp_path, preset, model, "--sandbox-network", "sealed"
    )
    async with client:
        try:
            events = await chat_turn(client, preset, "Search")
        except AssertionError:
            print("\n".join(served.stderr[-80:]))
            raise
    kinds = [e.event for e in events]
    assert kinds[-2:] == ["result", "done"], [(e.event, e.data) for e in events[-5:]]
    results = model.tool_results()
    assert any("key-search: no" in r for r in results), results
    assert not any("key-search: yes" in r for r in results), results
    assert any("credential-in-env" in r for r in results), results
    generations = model.generations()
    assert generations
    for recorded in model.received:
        presented = " ".join(recorded.headers.values())
        assert CREDENTIAL_PREFIX not in presented, recorded.headers
    for recorded in generations:
        assert key in " ".join(recorded.headers.values()) or recorded.protocol == "gemini"
