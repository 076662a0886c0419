"""Forking a chat over real sockets, on SQLite and PostgreSQL: ``POST
/api/assistant/chats/{chatId}/fork`` makes a new chat of one assistant message's
history and the workspace snapshot its turn saved (else the newest before it); the
fork's next turn restores that and replays that, not the later turns'. End to end with
scripted agents in real containers, and through the store's own turn path (no
container) for where the snapshot comes from, the bag files, deletion and every
refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

from sandstream.core import (
    ChatTurn,
    ConfigResponse,
)
from sandstream.core.schemas import ScriptedAgent
from tests.chat.harness import WORKSPACE, ChatServer, TurnRun, plans, shell, start_chat_server
from tests.chat.snapshot_harness import SandboxTurn, begin, finish, manifest_of, save, sha

both_databases = pytest.mark.usefixtures("chat_database")


def _workspace(turns: int) -> dict[str, bytes]:
    """What the chat's work dir holds after turn ``turns`` (turn n writes ``fn.txt`` and
    appends a line to ``log.txt``), by snapshot path."""
    files = {f"work/f{n}.txt": f"{n}\n".encode() for n in range(1, turns + 1)}
    files["work/log.txt"] = "".join(f"turn {n}\n" for n in range(1, turns + 1)).encode()
    return files


def _problem(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["type"] == f"urn:sandstream:problem:{kind}", problem
    return problem


async def _fork(
    client: httpx.AsyncClient, chat_id: str, message_id: str, workspace: str = WORKSPACE
) -> httpx.Response:
    return await client.post(
        f"/api/assistant/chats/{chat_id}/fork",
        params={"workspaceId": workspace},
        json={"messageId": message_id},
    )


async def _forked(client: httpx.AsyncClient, chat_id: str, message_id: str) -> dict[str, Any]:
    response = await _fork(client, chat_id, message_id)
    assert response.status_code == 201, response.text
    chat: dict[str, Any] = response.json()
    return chat


async def _save(client: httpx.AsyncClient, turn: SandboxTurn, files: dict[str, bytes]) -> None:
    """What a sandbox does after its turn, for the work dir ``files``."""
    response = await save(client, turn, manifest_of(files), *files.values())
    assert response.status_code == 201, response.text


async def _config(client: httpx.AsyncClient, turn: SandboxTurn) -> ConfigResponse:
    response = await client.get(f"{turn.base}/config", headers=turn.run())
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=ConfigResponse)


async def _restore(client: httpx.AsyncClient, turn: SandboxTurn, data: bytes) -> httpx.Response:
    return await client.post(
        f"{turn.base}/snapshot/restore",
        headers=turn.run(),
        json={"sha256": [sha(data)]},
    )


async def _turns(server: ChatServer, client: httpx.AsyncClient, *saves: bool) -> list[SandboxTurn]:
    """Settled turns of one chat, one per ``saves``: turn n says ``turn n``, answers
    ``answer n`` and saves the workspace of :func:`_workspace` when ``saves[n - 1]``."""
    turns: list[SandboxTurn] = []
    chat_id: str | None = None
    for n, saving in enumerate(saves, start=1):
        turn = await begin(server, chat_id, text=f"turn {n}")
        if saving:
            await _save(client, turn, _workspace(n))
        await finish(server, turn, f"answer {n}")
        chat_id = turn.chat_id
        turns.append(turn)
    return turns


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A message without its id (a fork's copies have new ones)."""
    return {key: value for key, value in message.items() if key != "id"}


async def _chat_ids(client: httpx.AsyncClient) -> list[str]:
    response = await client.get("/api/assistant/chats", params={"workspaceId": WORKSPACE})
    assert response.status_code == 200, response.text
    return sorted(chat["id"] for chat in response.json()["chats"])


# -- end to end ---------------------------------------------------------------------------


def _stdout(run: TurnRun) -> list[str]:
    assert run.kinds[-2:] == ["result", "done"], run.body[-800:]
    step = run.folded().steps[-1]
    assert step.status == "succeeded" and step.result is not None, step
    result: dict[str, Any] = msgspec.json.decode(step.result)
    return str(result["stdout"]).splitlines()


async def _replayed(server: ChatServer, run: TurnRun) -> list[tuple[str, str]]:
    """The conversation the turn's dispatch replayed to its sandbox: role and text."""
    answer = run.start["assistantMessageId"]
    raw = await server.store.db.read(
        lambda conn: conn.execute(
            "SELECT conversation FROM sessions WHERE assistant_message_id = ?", (answer,)
        ).fetchone()[0]
    )
    return [(t.role, t.content) for t in msgspec.json.decode(raw, type=list[ChatTurn])]


@both_databases
async def test_a_fork_goes_on_from_its_message_with_that_turns_files_and_history(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    def writes(n: int) -> ScriptedAgent:
        return ScriptedAgent(
            steps=[shell(f"echo {n} > f{n}.txt && echo turn {n} >> log.txt")],
            message=f"wrote f{n}.txt",
        )

    look = ScriptedAgent(steps=[shell("ls; cat log.txt")], message="looked")
    agent = plans(one=writes(1), two=writes(2), three=writes(3), look=look)
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    first = await server.turn("one")
    assert first.kinds[-2:] == ["result", "done"], first.body[-800:]
    source = first.chat_id
    for word in ("two", "three"):
        run = await server.turn(word, chat_id=source)
        assert run.kinds[-2:] == ["result", "done"], run.body[-800:]
    history = (await server.chat(source))["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"] * 3

    async with server.client() as client:
        fork = await _forked(client, source, history[1]["id"])
    assert fork["id"] != source and fork["title"] == "one (fork)"
    assert fork["messageCount"] == 2

    # The source goes on from its own last turn.
    mainline = await server.turn("look", chat_id=source)
    assert _stdout(mainline) == [
        "f1.txt",
        "f2.txt",
        "f3.txt",
        "log.txt",
        "output",
        "turn 1",
        "turn 2",
        "turn 3",
    ]
    assert len(await _replayed(server, mainline)) == 6

    # Deleting the source leaves the fork its workspace and its history: the fork goes on
    # from the first turn.
    async with server.client() as client:
        deleted = await client.delete(
            f"/api/assistant/chats/{source}", params={"workspaceId": WORKSPACE}
        )
    assert deleted.status_code == 204, deleted.text
    went_on = await server.turn("look", chat_id=fork["id"])
    assert _stdout(went_on) == ["f1.txt", "log.txt", "output", "turn 1"]
    assert await _replayed(server, went_on) == [("user", "one"), ("assistant", "wrote f1.txt")]
    messages = (await server.chat(fork["id"]))["messages"]
    assert [_plain(m) for m in messages[:2]] == [_plain(m) for m in history[:2]]
    assert len(messages) == 4


# -- where the snapshot comes from -------------------------------------------------------


@both_databases
async def test_the_fork_restores_the_snapshot_of_its_message_and_no_later_one(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    async with server.client() as client:
        one, _, three = await _turns(server, client, True, True, True)
        fork = await _forked(client, one.chat_id, one.answer_id)
        source = await client.get(
            f"/api/assistant/chats/{one.chat_id}", params={"workspaceId": WORKSPACE}
        )
        copied = await client.get(
            f"/api/assistant/chats/{fork['id']}", params={"workspaceId": WORKSPACE}
        )
    assert copied.status_code == 200, copied.text
    assert [_plain(m) for m in copied.json()["messages"]] == [
        _plain(m) for m in source.json()["messages"][:2]
    ]
    assert {m["id"] for m in copied.json()["messages"]}.isdisjoint(
        m["id"] for m in source.json()["messages"]
    )
    assert fork["conversationId"] == copied.json()["messages"][0]["id"]
    assert (fork["workspaceId"], fork["title"], fork["messageCount"]) == (
        WORKSPACE,
        "turn 1 (fork)",
        2,
    )
    assert "activeMessageId" not in fork

    following = await begin(server, fork["id"], text="go on")
    assert [(t.role, t.content) for t in following.start.session.conversation] == [
        ("user", "turn 1"),
        ("assistant", "answer 1"),
    ]
    async with server.client(auth=False) as client:
        assert (await _config(client, following)).snapshot == manifest_of(_workspace(1))
        restored = await _restore(client, following, _workspace(1)["work/log.txt"])
        assert restored.status_code == 200, restored.text
        later = await _restore(client, following, _workspace(3)["work/f3.txt"])
        _problem(later, 404, "not-found")  # only the source's later turns list it
    # The source itself goes on from its third turn.
    await finish(server, following, "went on")
    mainline = await begin(server, three.chat_id, text="go on")
    async with server.client(auth=False) as client:
        assert (await _config(client, mainline)).snapshot == manifest_of(_workspace(3))


@both_databases
async def test_a_turn_that_saved_nothing_forks_the_newest_snapshot_before_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    async with server.client() as client:
        one, two, three = await _turns(server, client, False, True, False)
        forks = {
            name: await _forked(client, turn.chat_id, turn.answer_id)
            for name, turn in (("one", one), ("two", two), ("three", three))
        }
        # A fork of a fork, from its copy of the second answer: the same snapshot.
        copies = await client.get(
            f"/api/assistant/chats/{forks['three']['id']}", params={"workspaceId": WORKSPACE}
        )
        twice = await _forked(client, forks["three"]["id"], copies.json()["messages"][3]["id"])
    assert twice["title"] == "turn 1 (fork) (fork)" and twice["messageCount"] == 4
    expected = {
        forks["one"]["id"]: None,
        forks["two"]["id"]: manifest_of(_workspace(2)),
        forks["three"]["id"]: manifest_of(_workspace(2)),
        twice["id"]: manifest_of(_workspace(2)),
    }
    for chat_id, manifest in expected.items():
        turn = await begin(server, chat_id, text="go on")
        async with server.client(auth=False) as client:
            assert (await _config(client, turn)).snapshot == manifest, chat_id


@both_databases
async def test_deleting_either_chat_leaves_the_other_whole(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    upload, result = b"the user's notes\n", b"what the run wrote back\n"
    async with server.client() as client:
        created = await client.post("/api/assistant/chats", json={"workspaceId": WORKSPACE})
        chat_id = created.json()["id"]
        uploaded = await client.post(
            f"/api/assistant/chats/{chat_id}/files",
            params={"workspaceId": WORKSPACE},
            files=[("files", ("notes.txt", upload, "text/plain"))],
        )
        assert uploaded.status_code == 201, uploaded.text
        turn = await begin(
            server, chat_id, text="turn 1", attachment_ids=(uploaded.json()["files"][0]["id"],)
        )
        results = await client.post(
            f"{turn.base}/results",
            headers=turn.upload(),
            files=[("files", ("report.txt", result, "text/plain"))],
        )
        assert results.status_code == 201, results.text
        await _save(client, turn, _workspace(1))
        await finish(server, turn, "answer 1")
        fork = await _forked(client, chat_id, turn.answer_id)
        other = await _forked(client, chat_id, turn.answer_id)
        assert await _chat_ids(client) == sorted([chat_id, fork["id"], other["id"]])
        for gone in (chat_id, other["id"]):
            deleted = await client.delete(
                f"/api/assistant/chats/{gone}", params={"workspaceId": WORKSPACE}
            )
            assert deleted.status_code == 204, deleted.text
        assert await _chat_ids(client) == [fork["id"]]
        params = {"workspaceId": WORKSPACE}
        messages = (await client.get(f"/api/assistant/chats/{fork['id']}", params=params)).json()[
            "messages"
        ]
        listed = (
            await client.get(f"/api/assistant/chats/{fork['id']}/files", params=params)
        ).json()["files"]
        attached = [a for m in messages for a in m.get("fileAttachments", [])]
        assert [(a["name"], a["sha256"]) for a in attached] == [
            ("notes.txt", sha(upload)),
            ("report.txt", sha(result)),
        ]
        assert sorted(f["id"] for f in listed) == sorted(a["id"] for a in attached)
        assert all(f["chatId"] == fork["id"] for f in listed)
        for attachment, content in zip(attached, (upload, result), strict=True):
            download = await client.get(
                f"/api/assistant/chats/{fork['id']}/files/{attachment['id']}", params=params
            )
            assert download.status_code == 200 and download.content == content
    following = await begin(server, fork["id"], text="go on")
    async with server.client(auth=False) as client:
        assert (await _config(client, following)).snapshot == manifest_of(_workspace(1))
        restored = await _restore(client, following, _workspace(1)["work/f1.txt"])
        assert restored.status_code == 200, restored.text
    # The fork, deleted too: its snapshot goes, and with it the manifest.
    async with server.client() as client:
        deleted = await client.delete(
            f"/api/assistant/chats/{fork['id']}", params={"workspaceId": WORKSPACE}
        )
    assert deleted.status_code == 409  # its turn holds it
    await finish(server, following, "done")
    async with server.client() as client:
        deleted = await client.delete(
            f"/api/assistant/chats/{fork['id']}", params={"workspaceId": WORKSPACE}
        )
    assert deleted.status_code == 204, deleted.text
    manifests = await server.store.db.read(
        lambda conn: conn.execute("SELECT COUNT(*) FROM snapshot_manifests").fetchone()[0]
    )
    assert manifests == 0


# -- refusals -----------------------------------------------------------------------------


@both_databases
async def test_a_fork_needs_a_settled_assistant_message_of_the_chat(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    async with server.client() as client:
        [settled] = await _turns(server, client, True)
        chat_id = settled.chat_id
        elsewhere = await begin(server, None, text="another chat")
        await finish(server, elsewhere, "another answer")
        running = await begin(server, chat_id, text="turn 2")  # the source is busy now
        before = await _chat_ids(client)

        _problem(await _fork(client, "chat_nope", settled.answer_id), 404, "not-found")
        _problem(await _fork(client, chat_id, settled.answer_id, "ws_other"), 404, "not-found")
        for message_id, reason in (
            (elsewhere.answer_id, "is not a message of this chat"),
            ("msg_nope", "is not a message of this chat"),
            (settled.start.user_message.id, "is a user message"),
            (running.start.user_message.id, "is a user message"),
        ):
            problem = _problem(await _fork(client, chat_id, message_id), 422, "fork-point")
            assert (problem["chatId"], problem["messageId"]) == (chat_id, message_id)
            assert reason in problem["detail"]
        problem = _problem(
            await _fork(client, chat_id, running.answer_id), 409, "fork-point-running"
        )
        assert problem["messageId"] == running.answer_id
        url = f"/api/assistant/chats/{chat_id}/fork"
        for body in ({}, {"messageId": "bad id"}, {"messageId": 7}):
            response = await client.post(url, params={"workspaceId": WORKSPACE}, json=body)
            _problem(response, 422, "invalid-body")
        _problem(await client.post(url, json={"messageId": settled.answer_id}), 422, "invalid-body")
        assert await _chat_ids(client) == before  # nothing written
        unauthorized = await client.post(
            url,
            params={"workspaceId": WORKSPACE},
            json={"messageId": settled.answer_id},
            headers={"Authorization": "Bearer wrong"},
        )
        _problem(unauthorized, 401, "unauthorized")
        # The busy source forks from what settled.
        fork = await _forked(client, chat_id, settled.answer_id)
    assert fork["messageCount"] == 2 and "activeMessageId" not in fork
    await finish(server, running, "answer 2")
    async with server.client() as client:
        assert (await _forked(client, chat_id, running.answer_id))["messageCount"] == 4
