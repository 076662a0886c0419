"""The AI SDK UI message stream read by the real `ai` npm package (tests/node).

A real chat server with the embedded runner runs scripted agents; a Node process uses
the SDK's ``DefaultChatTransport`` (``useChat``'s request and SSE parsing) and
``readUIMessageStream``, with ai 5.0.0's strict chunk schema reading the same bytes.
The message the SDK builds must be the one the chat stored: the same steps as tool
parts, the same text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from sandstream.core import StreamProcessor, UIMessageStream
from sandstream.core.persistence import assistant_message
from sandstream.core.schemas import ScriptedError, ScriptedStep
from tests.chat.harness import (
    API_TOKEN,
    DEADLINE,
    WORKSPACE,
    ChatServer,
    plans,
    scripted,
    shell,
    sleeping,
    start_chat_server,
    write,
)

pytestmark = pytest.mark.usefixtures("chat_database")

ROOT = Path(__file__).resolve().parents[2]
NODE_CLIENT = ROOT / "tests" / "node" / "ui_stream_client.mjs"


async def use_chat(node: Path, server: ChatServer, **options: Any) -> dict[str, Any]:
    """Run the Node client with ``options`` against ``server``; its JSON output."""
    options = {
        "mode": "send",
        "api": f"{server.url}/api/assistant/ui/chat?workspaceId={WORKSPACE}",
        "token": API_TOKEN,
        **options,
    }
    with trio.fail_after(DEADLINE):
        done = await trio.run_process(
            [str(node), str(NODE_CLIENT), json.dumps(options)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    output: dict[str, Any] = json.loads(done.stdout)
    return output


async def new_chat(server: ChatServer) -> str:
    async with server.client() as client:
        response = await client.post("/api/assistant/chats", json={"workspaceId": WORKSPACE})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def expected_parts(stored: dict[str, Any], chat_id: str) -> list[dict[str, Any]]:
    """The UIMessage parts the stored assistant message stands for: each step a
    ``dynamic-tool`` part (its output, or its error), then the text if any (it
    streamed live, before the terminal), then each file it wrote back a ``file`` part
    (its download path)."""
    blocks = stored["content"]
    outputs = {b["stepId"]: b["output"] for b in blocks if b["type"] == "tool_output"}
    steps: list[dict[str, Any]] = next((b["steps"] for b in blocks if b["type"] == "steps"), [])
    parts: list[dict[str, Any]] = []
    for step in steps:
        part = {
            "type": "dynamic-tool",
            "toolCallId": step["id"],
            "toolName": step["name"],
            "input": step.get("args"),
        }
        if step["status"] == "succeeded":
            part |= {"state": "output-available", "output": outputs.get(step["id"])}
        else:
            part |= {"state": "output-error", "errorText": step.get("error") or "failed"}
        parts.append(part)
    texts = [b["text"] for b in blocks if b["type"] == "text"]
    parts += [{"type": "text", "text": text, "state": "done"} for text in texts]
    parts += [
        {
            "type": "file",
            "mediaType": file["contentType"],
            "url": f"/api/assistant/chats/{chat_id}/files/{file['id']}?workspaceId={WORKSPACE}",
        }
        for file in stored.get("fileAttachments", [])
    ]
    return parts


def built_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The SDK's message parts, with only the fields the stored message has."""
    keys: tuple[str, ...] = ("type", "toolCallId", "toolName", "input", "state", "output")
    keys += ("errorText", "text", "mediaType", "url")
    return [{k: part[k] for k in keys if k in part} for part in message["parts"]]


def assert_built_as_stored(output: dict[str, Any], stored: dict[str, Any], chat_id: str) -> None:
    message = output["message"]
    assert message["id"] == stored["id"]
    assert message["role"] == "assistant"
    assert built_parts(message) == expected_parts(stored, chat_id)
    # ai 5.0.0 (strict chunk objects) read the same bytes to the same message.
    assert output["message500"] == message
    assert output["errors500"] == output["errors"]


async def test_use_chat_builds_the_message_the_chat_stored(
    nursery: trio.Nursery, tmp_path: Path, node: Path
) -> None:
    agent = scripted(
        shell("echo hi"),
        ScriptedStep(tool="read_file", args={"path": "no/such/file.txt"}),
        write("output/notes.md", "# notes\n"),
        message="ok {prompt}\nsecond line",
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    chat_id = await new_chat(server)

    output = await use_chat(node, server, chatId=chat_id, text="hello there")

    assert output["errors"] == []
    chat = await server.chat(chat_id)
    user, stored = chat["messages"]
    assert user["content"] == [{"type": "text", "text": "hello there"}]
    assert stored["status"] == "complete"
    assert_built_as_stored(output, stored, chat_id)
    parts = output["message"]["parts"]
    kinds = [(p["toolName"], p["state"]) for p in parts[:3]]
    assert kinds == [
        ("run_shell", "output-available"),
        ("read_file", "output-error"),
        ("write_file", "output-available"),
    ]
    # The written-back file is a file part the client can download with its token.
    [written] = stored["fileAttachments"]
    assert written["name"] == "notes.md"
    async with server.client() as client:
        download = await client.get(parts[4]["url"])
    assert download.content == b"# notes\n"
    # The text streamed in before the file was announced (with the terminal).
    assert parts[3]["text"] == "ok hello there\nsecond line"


async def test_an_error_turn_reaches_on_error_with_its_steps(
    nursery: trio.Nursery, tmp_path: Path, node: Path
) -> None:
    agent = scripted(shell("echo hi"), error=ScriptedError("model_error", "the model said no"))
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    chat_id = await new_chat(server)

    output = await use_chat(node, server, chatId=chat_id, text="try")

    assert output["errors"] == ["[model_error] the model said no"]
    stored = (await server.chat(chat_id))["messages"][-1]
    assert stored["status"] == "failed"
    assert_built_as_stored(output, stored, chat_id)
    assert [p["type"] for p in output["message"]["parts"]] == ["dynamic-tool"]


async def test_file_parts_name_files_of_the_chats_bag(
    nursery: trio.Nursery, tmp_path: Path, node: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    chat_id = await new_chat(server)
    async with server.client() as client:
        response = await client.post(
            f"/api/assistant/chats/{chat_id}/files",
            params={"workspaceId": WORKSPACE},
            files={"file": ("notes.txt", b"some notes", "text/plain")},
        )
    assert response.status_code == 201, response.text
    file_id = response.json()["files"][0]["id"]
    url = f"{server.url}/api/assistant/chats/{chat_id}/files/{file_id}?workspaceId={WORKSPACE}"

    output = await use_chat(node, server, chatId=chat_id, text="read it", fileUrls=[url])

    assert output["errors"] == []
    user, stored = (await server.chat(chat_id))["messages"]
    assert [a["id"] for a in user["fileAttachments"]] == [file_id]
    assert_built_as_stored(output, stored, chat_id)
    assert output["message"]["parts"][-1]["text"] == "Done: read it"

    refused = await use_chat(
        node, server, chatId=chat_id, text="x", fileUrls=["data:text/plain;base64,eA=="]
    )
    assert "a file part's url must be a file of this chat's bag" in refused["requestError"]


async def test_resume_follows_the_live_turn_from_its_start_and_is_204_when_none(
    nursery: trio.Nursery, tmp_path: Path, node: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=plans(slow=sleeping(300)))
    chat_id = await new_chat(server)

    idle = await use_chat(node, server, mode="resume", chatId=chat_id)
    assert idle["message"] is None  # the transport's null: the route answered 204

    body = ui_body(chat_id, "slow please")
    async with (
        server.client() as client,
        client.stream(
            "POST", "/api/assistant/ui/chat", params={"workspaceId": WORKSPACE}, json=body
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert response.headers["content-type"].startswith("text/event-stream")
        first = await response.aiter_bytes().__anext__()
        assert first.startswith(b'data: {"type":"start","messageId":"msg_')
    # The client left; the turn goes on (onDisconnect "continue"), and a resume
    # rebuilds its whole message: the running tool, then its end when it is stopped.
    with trio.fail_after(DEADLINE):
        while len(server.service.turns.viewers) > 0:  # the first client's body is closed
            await trio.sleep(0.01)
    resumed: list[dict[str, Any]] = []

    async def resume() -> None:
        resumed.append(await use_chat(node, server, mode="resume", chatId=chat_id))

    async with trio.open_nursery() as viewers:
        viewers.start_soon(resume)
        with trio.fail_after(DEADLINE):
            while len(server.service.turns.viewers) == 0:
                await trio.sleep(0.01)
        async with server.client() as client:
            stopped = await client.post(
                f"/api/assistant/chats/{chat_id}/interrupt", params={"workspaceId": WORKSPACE}
            )
        assert stopped.status_code == 200, stopped.text
    stored = (await server.chat(chat_id))["messages"][-1]
    assert stored["status"] == "interrupted"
    assert_built_as_stored(resumed[0], stored, chat_id)
    idle = await use_chat(node, server, mode="resume", chatId=chat_id)
    assert idle["message"] is None


def ui_body(chat_id: str, text: str, **fields: Any) -> dict[str, Any]:
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat_id, "messages": [message], "trigger": "submit-message", **fields}


@pytest.mark.parametrize(
    ("change", "status", "detail"),
    [
        ({"trigger": "regenerate-message", "messageId": "m1"}, 422, "only new messages"),
        ({"messageId": "m1"}, 422, "only new messages"),
        ({"messages": []}, 422, "the body is invalid"),
        (
            {"messages": [{"id": "a", "role": "assistant", "parts": []}]},
            422,
            "must be the user's",
        ),
        ({"messages": [{"id": "u", "role": "user", "parts": []}]}, 422, "must not be blank"),
        ({"id": "chat_unknown"}, 404, "no chat 'chat_unknown'"),
        ({"workspaceId": "elsewhere"}, 404, "in this workspace"),
        ({"id": "../x"}, 422, "the body is invalid"),
    ],
)
async def test_bad_requests_get_problems(
    server: ChatServer, change: dict[str, Any], status: int, detail: str
) -> None:
    chat_id = await new_chat(server)
    body = ui_body(chat_id, "hello") | change
    async with server.client() as client:
        response = await client.post(
            "/api/assistant/ui/chat", params={"workspaceId": WORKSPACE}, json=body
        )
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert detail in response.json()["detail"]
    assert "activeMessageId" not in await server.chat(chat_id)  # no turn was started


async def test_both_routes_need_the_token_and_a_workspace(server: ChatServer) -> None:
    chat_id = await new_chat(server)
    async with server.client(auth=False) as anonymous, server.client() as client:
        for response in (
            await anonymous.post("/api/assistant/ui/chat", json=ui_body(chat_id, "hi")),
            await anonymous.get(f"/api/assistant/ui/chat/{chat_id}/stream"),
        ):
            assert response.status_code == 401
        no_workspace = await client.post("/api/assistant/ui/chat", json=ui_body(chat_id, "hi"))
        assert no_workspace.status_code == 422
        assert "workspaceId" in no_workspace.json()["detail"]
        unknown = await client.get(
            "/api/assistant/ui/chat/chat_nope/stream", params={"workspaceId": WORKSPACE}
        )
        assert unknown.status_code == 404


async def test_the_workspace_may_come_in_the_body(server: ChatServer) -> None:
    chat_id = await new_chat(server)
    async with server.client() as client:
        response = await client.post(
            "/api/assistant/ui/chat", json=ui_body(chat_id, "hi", workspaceId=WORKSPACE)
        )
    assert response.status_code == 200, response.text
    frames = [f for f in response.content.split(b"\n\n") if f.startswith(b"data: ")]
    assert frames[-1] == b"data: [DONE]"
    chunks = [msgspec.json.decode(f[6:]) for f in frames[:-1]]
    assert [c["type"] for c in chunks] == [
        "start",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "finish",
    ]  # the answer streamed word by word (the live extension)
    assert chunks[2]["delta"] + chunks[3]["delta"] == "Done: hi"


async def test_file_parts_must_be_files_of_this_chats_bag(server: ChatServer) -> None:
    chat_id = await new_chat(server)
    other = await new_chat(server)

    async def send(url: str) -> dict[str, Any]:
        body = ui_body(chat_id, "see attached")
        body["messages"][0]["parts"].append({"type": "file", "mediaType": "text/plain", "url": url})
        async with server.client() as client:
            response = await client.post(
                "/api/assistant/ui/chat", params={"workspaceId": WORKSPACE}, json=body
            )
        assert response.status_code == 422, response.text
        problem: dict[str, Any] = response.json()
        return problem

    foreign = await send(f"/api/assistant/chats/{other}/files/file_1")
    assert "must be a file of this chat's bag" in foreign["detail"]
    unknown = await send(f"https://elsewhere.example/api/assistant/chats/{chat_id}/files/file_1")
    assert unknown["type"] == "urn:sandstream:problem:unknown-attachment"
    assert unknown["unknownIds"] == ["file_1"]
    assert "activeMessageId" not in await server.chat(chat_id)


async def test_a_shutdown_mid_turn_closes_the_running_step_as_stored(
    nursery: trio.Nursery, tmp_path: Path, node: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=plans(slow=sleeping(300)))
    chat_id = await new_chat(server)
    outputs: list[dict[str, Any]] = []

    async def client() -> None:
        outputs.append(await use_chat(node, server, chatId=chat_id, text="slow please"))

    nursery.start_soon(client)
    with trio.fail_after(DEADLINE):  # the sleeping step has been streamed
        while not await _step_running(server, chat_id):
            await trio.sleep(0.05)
    await server.shutdown()
    with trio.fail_after(DEADLINE):
        while not outputs:
            await trio.sleep(0.05)

    [output] = outputs
    assert output["errors"] == ["[shutdown] the server is shutting down"]
    messages = await server.store.get_messages(WORKSPACE, chat_id)  # the server is gone
    stored = msgspec.json.decode(msgspec.json.encode(messages[-1]))
    assert stored["status"] == "failed"
    assert_built_as_stored(output, stored, chat_id)
    [part] = output["message"]["parts"]
    assert part["state"] == "output-error" and "[shutdown]" in part["errorText"]


async def _step_running(server: ChatServer, chat_id: str) -> bool:
    """Whether the chat's live turn has streamed a running step into its session."""
    turn = await server.service.turns.latest(WORKSPACE, chat_id)
    if turn is None or turn.record.session_id is None or server.service.sessions is None:
        return False
    session = server.service.sessions.get(turn.record.session_id)
    return any(b'"status":"running"' in run.data for run in await session.read_runs(0, 1 << 20))


# -- the live extension, read by ai 5.0.0, the latest 5, 6 and 7 -------------------------

LIVE_TURN: list[dict[str, Any]] = [
    {"type": "delta", "id": "a1", "kind": "reasoning", "text": "The user wants "},
    {"type": "delta", "id": "a1", "kind": "reasoning", "text": "a listing."},
    {"type": "delta", "id": "a1", "kind": "text", "text": "Let me "},
    {"type": "delta", "id": "a1", "kind": "text", "text": "look.\n"},
    {"type": "step", "id": "s1", "name": "shell", "status": "running", "args": {"cmd": "ls"}},
    {
        "type": "permission",
        "id": "p1",
        "status": "pending",
        "step": "s1",
        "title": "Run ls",
        "options": [
            {"id": "o1", "kind": "allow_once", "name": "Allow once"},
            {"id": "o2", "kind": "reject_once", "name": "Reject"},
        ],
    },
    {"type": "permission", "id": "p1", "status": "resolved", "reply": "once"},
    {"type": "step", "id": "s1", "name": "shell", "status": "succeeded", "result": "a.txt\n"},
    {"type": "delta", "id": "a2", "kind": "text", "text": "There is "},
    {"type": "delta", "id": "a2", "kind": "text", "text": "one file."},
    {"type": "result", "message": "Let me look.\nThere is one file."},
]
READERS = {5: ["5.0.0", "5", "6", "7"], 6: ["6", "7"], 7: ["7"]}
"""For each version a client states, the `ai` versions that must read its stream."""


def live_ui_stream(ai_version: int, lines: list[dict[str, Any]]) -> tuple[bytes, Any]:
    """The UI message stream of ``lines`` through the chat's SSE, and the stored message."""
    processor = StreamProcessor("sse", extensions=["live"])
    sse = processor.feed(b"".join(msgspec.json.encode(one) + b"\n" for one in lines))
    sse += processor.close()
    stream = UIMessageStream("msg-1", ai_version=ai_version)
    ui = stream.feed(sse) + stream.close()
    message = assistant_message(processor.turn, message_id="msg-1", created_at=0)
    return ui, (processor.turn, msgspec.json.decode(msgspec.json.encode(message)))


async def read_with_each_ai(node: Path, ui: bytes, tmp_path: Path) -> dict[str, Any]:
    body = tmp_path / "ui-stream.txt"
    body.write_bytes(ui)
    with trio.fail_after(DEADLINE):
        done = await trio.run_process(
            [str(node), str(NODE_CLIENT), json.dumps({"mode": "read", "file": str(body)})],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    output: dict[str, Any] = json.loads(done.stdout)
    return output


@pytest.mark.parametrize("ai_version", [5, 6, 7])
async def test_each_ai_version_folds_the_live_stream_to_the_stored_message(
    ai_version: int, tmp_path: Path, node: Path
) -> None:
    ui, (turn, stored) = live_ui_stream(ai_version, LIVE_TURN)
    read = await read_with_each_ai(node, ui, tmp_path)
    blocks = stored["content"]
    for version in READERS[ai_version]:
        assert read[version]["errors"] == [], version
        message = read[version]["message"]
        assert message["id"] == "msg-1"
        parts = message["parts"]
        # Text and reasoning as they streamed, one part per run of one message id.
        assert [(p["type"], p["text"], p["state"]) for p in parts if "text" in p] == [
            (part.kind, part.text, "done") for part in turn.parts
        ]
        texts = "".join(p["text"] for p in parts if p["type"] == "text")
        assert (
            texts == turn.result.message == next(b["text"] for b in blocks if b["type"] == "text")
        )
        reasoning = [p["text"] for p in parts if p["type"] == "reasoning"]
        assert reasoning == [b["text"] for b in blocks if b["type"] == "reasoning"]
        # The request as the stored message holds it, the step as it ended.
        data = [p for p in parts if p["type"] == "data-permission"]
        assert [(p["id"], p["data"]) for p in data] == [
            (b["id"], b) for b in blocks if b["type"] == "permission"
        ]
        (tool,) = [p for p in parts if p["type"] == "dynamic-tool"]
        assert (tool["toolCallId"], tool["state"], tool["output"]) == (
            "s1",
            "output-available",
            "a.txt\n",
        )
        approval = tool.get("approval")
        if ai_version == 5:
            assert approval is None
        else:
            assert approval["id"] == "p1"
            assert approval.get("approved") is (True if ai_version == 7 else None)
    for version in set(READERS[5]) - set(READERS[ai_version]):
        # A chunk its version does not know fails that version's client: the reason
        # the stream sends it only to a client that states a later one.
        assert read[version]["errors"], version


@pytest.mark.parametrize("ai_version", [5, 6, 7])
async def test_each_ai_version_sees_a_request_left_pending_closed_as_stored(
    ai_version: int, tmp_path: Path, node: Path
) -> None:
    ui, (_, stored) = live_ui_stream(ai_version, LIVE_TURN[:6])
    read = await read_with_each_ai(node, ui, tmp_path)
    (block,) = [b for b in stored["content"] if b["type"] == "permission"]
    assert (block["status"], block["reply"]) == ("resolved", "cancelled")
    for version in READERS[ai_version]:
        message = read[version]["message"]
        assert read[version]["errors"] == [
            "[upstream_closed] upstream ended without a result or error"
        ]
        (data,) = [p for p in message["parts"] if p["type"] == "data-permission"]
        assert data["data"] == block
        (tool,) = [p for p in message["parts"] if p["type"] == "dynamic-tool"]
        assert tool["state"] == "output-error"
