"""Test harness for the chat backend: the real app on Hypercorn at 127.0.0.1:0.

::

    server = await start_chat_server(nursery, tmp_path, agent=scripted(shell("echo hi")))
    run = await server.turn("hello")                  # POST /api/assistant/chat/stream, to the end
    run.kinds == ["start", "step", "step", "delta", "delta", "result", "done"]
    stored = await server.chat(run.chat_id)           # GET /api/assistant/chats/{id}
    assert persisted_form(run, stored["messages"][-1]) == stored["messages"][-1]

SSE is parsed with the core's :class:`~sandstream.core.sse_parser.SSEParser`; the live
stream is folded with the core's :class:`~sandstream.core.StreamProcessor`, exactly as
a browser-side consumer would. Everything is real: SQLite in ``tmp_path``, the
embedded runner spawning containers, httpx over HTTP/1.1. Waiting is done by polling
under deadlines, never by sleeping a fixed time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec
import psutil
import trio
from hypercorn.config import Config
from quart_trio import QuartTrio

from benchmarks.chat.serving import LISTENING
from benchmarks.support.model_server import ModelServer
from benchmarks.support.ports import free_port
from benchmarks.support.server_process import ServerProcess
from benchmarks.support.servers import http1_client
from sandstream.core import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_STEP_BYTES,
    DEFAULT_MAX_STEPS,
    StreamProcessor,
    Turn,
)
from sandstream.core.agents_dir import AGENTS_DIR_ENV, default_agents_dir
from sandstream.core.envelope import LIVE_EXTENSION, USAGE_EXTENSION
from sandstream.core.persistence import PersistedFileAttachment, PersistedMessage, assistant_message
from sandstream.core.schemas import ConfigResponse, ScriptedAgent, ScriptedStep
from sandstream.core.sse_parser import Comment, ServerSentEvent, SSEParser
from sandstream.server import (
    BwrapLauncher,
    LocalSubprocessLauncher,
    Runner,
    RunnerSettings,
    create_chat_app,
)
from sandstream.server.chat import (
    AgentProfile,
    ChatService,
    ChatSettings,
    SqlChatStore,
    fold_chunks,
    serve_chat,
)
from sandstream.server.chat.credentials.one_time import mint_tokens
from sandstream.server.chat.model.ids import new_id, now_ms
from sandstream.server.chat.model.records import DispatchRecord, TurnRequest, TurnStart
from sandstream.server.chat.mover import Passed, RemoteSource
from sandstream.server.chat.store.bag import PostgresBlobStore
from sandstream.server.chat.store.moved_runs import Batch
from sandstream.server.runner.launcher import DEFAULT_CONTAINER_ARGV
from sandstream.server.runner.network import Endpoint, parse_endpoint
from sandstream.server.runner.procs import TURN_MARKER_ENV
from sandstream.server.sessions import SessionSettings, split_chunks
from tests.chat.databases import database_url, open_store
from tests.support import processes
from tests.support.container import alive

API_TOKEN = "test-api-token"
RUNNER_TOKEN = "test-runner-token"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
WORKSPACE = "ws_test"
DEADLINE = 60.0
"""Seconds any single wait may take on a loaded CI machine."""
AGENTS_DIR = default_agents_dir()
"""Where `sandstream agents install` put the ACP agents (.dev/test runs it)."""


# -- agents ------------------------------------------------------------------------------


def scripted(*steps: ScriptedStep, message: str = "Done: {prompt}", **kw: Any) -> AgentProfile:
    """A profile running the scripted agent with these steps."""
    agent = ScriptedAgent(steps=list(steps), message=message, **kw)
    return AgentProfile(ConfigResponse(agent=agent), {}, "scripted test agent")


@dataclass(frozen=True)
class PlanByPrompt(AgentProfile):
    """A scripted profile whose plan is chosen by the prompt's first word.

    ``plans["slow"]`` runs for a prompt like ``"slow please"``; other prompts get the
    template's plan. Lets one server run fast and slow turns side by side.
    """

    plans: dict[str, ScriptedAgent] = field(default_factory=dict)

    def config_for(self, session: DispatchRecord) -> ConfigResponse:
        config = super().config_for(session)
        words = session.prompt.split()
        plan = self.plans.get(words[0]) if words else None
        return config if plan is None else msgspec.structs.replace(config, agent=plan)


def plans(**by_word: ScriptedAgent) -> PlanByPrompt:
    """A :class:`PlanByPrompt`: ``plans(slow=sleeping(300))``; others answer "Done: …"."""
    template = ConfigResponse(agent=ScriptedAgent(message="Done: {prompt}"))
    return PlanByPrompt(template, {}, "test plans", plans=by_word)


def sleeping(seconds: float, *before: ScriptedStep) -> ScriptedAgent:
    """A plan that runs ``before`` then sleeps in a tool for ``seconds``."""
    return ScriptedAgent(steps=[*before, shell(f"sleep {seconds:g}")], message="slept")


def shell(command: str, timeout_sec: float = 300) -> ScriptedStep:
    return ScriptedStep(tool="run_shell", args={"command": command, "timeout_sec": timeout_sec})


def write(path: str, content: str) -> ScriptedStep:
    return ScriptedStep(tool="write_file", args={"path": path, "content": content})


# -- the server ----------------------------------------------------------------------------


@dataclass
class TurnRun:
    """One chat turn read from the wire: status, headers, events, comments."""

    status: int
    headers: httpx.Headers
    body: bytes
    events: list[ServerSentEvent] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    @property
    def kinds(self) -> list[str]:
        return [e.event for e in self.events]

    @property
    def start(self) -> dict[str, Any]:
        assert self.events and self.events[0].event == "start", self.kinds
        data: dict[str, Any] = msgspec.json.decode(self.events[0].data)
        return data

    @property
    def chat_id(self) -> str:
        return str(self.start["chatId"])

    @property
    def problem(self) -> dict[str, Any]:
        assert self.headers.get("content-type") == "application/problem+json", self.headers
        data: dict[str, Any] = msgspec.json.decode(self.body)
        return data

    def data(self, kind: str) -> list[dict[str, Any]]:
        return [msgspec.json.decode(e.data) for e in self.events if e.event == kind]

    def folded(self) -> Turn:
        """The live stream folded by the core, as a browser would render it."""
        return fold(self.events)


def parse_sse(body: bytes) -> tuple[list[ServerSentEvent], list[str]]:
    """Events and comments of an SSE body (the core's parser, arbitrary chunking)."""
    parser = SSEParser(include_comments=True)
    items: list[ServerSentEvent | Comment] = []
    for i in range(0, len(body), 7):  # odd chunks: the parser must not care
        items += parser.feed(body[i : i + 7])
    items += parser.close()
    events = [item for item in items if isinstance(item, ServerSentEvent)]
    comments = [item.text for item in items if isinstance(item, Comment)]
    return events, comments


LIVE_EVENTS: Final = ("step", "delta", "permission", "usage", "result", "error")
"""The events that carry envelope lines (the ``live`` and ``usage`` extensions' too)."""
EXTENSIONS: Final = (LIVE_EXTENSION, USAGE_EXTENSION)
"""The extensions the chat asks for, so its events' lines fold as it folds them."""


def _fed(events: list[ServerSentEvent]) -> StreamProcessor:
    """A fresh core processor fed the envelope events' data."""
    processor = StreamProcessor("ndjson", extensions=EXTENSIONS)
    for event in events:
        if event.event in LIVE_EVENTS:
            processor.feed(event.data.encode() + b"\n")
    return processor


def fold(events: list[ServerSentEvent]) -> Turn:
    """Feed the envelope events' data through a fresh core processor."""
    processor = _fed(events)
    processor.close()
    return processor.turn


def persisted_form(
    events: list[ServerSentEvent], stored: dict[str, Any], *, cancelled: bool = False
) -> dict[str, Any]:
    """The assistant message the live ``events`` fold to, with ``stored``'s id, time and
    attachments (the stream does not carry those), as plain JSON."""
    processor = _fed(events)
    if cancelled:
        processor.cancel("the client disconnected")
    else:
        processor.close()
    attachments = msgspec.convert(stored.get("fileAttachments", []), list[PersistedFileAttachment])
    message = assistant_message(
        processor.turn,
        message_id=stored["id"],
        created_at=stored["createdAt"],
        attachments=attachments,
    )
    plain: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(message))
    return plain


@dataclass
class ChatServer:
    """A running chat backend: URL, service, store; shut down with :meth:`shutdown`."""

    url: str
    service: ChatService
    data_dir: Path
    app: QuartTrio | None = None
    _stop: trio.Event = field(default_factory=trio.Event)
    _stopped: trio.Event = field(default_factory=trio.Event)

    @property
    def store(self) -> SqlChatStore:
        store = self.service.store
        assert isinstance(store, SqlChatStore)
        return store

    @property
    def runner(self) -> Runner:
        assert self.service.runner is not None
        return self.service.runner

    async def stored_blobs(self) -> list[str]:
        """The SHA-256 of every blob the bag holds (files, or PostgreSQL rows)."""
        blobs = self.service.blobs
        if isinstance(blobs, PostgresBlobStore):
            return await blobs.db.read(
                lambda conn: [r[0] for r in conn.execute("SELECT sha256 FROM bag_blobs")]
            )
        return sorted(p.name for p in blobs.blobs.rglob("*") if p.is_file())

    async def remove_blob(self, sha256: str) -> None:
        """Remove a blob from under the bag's metadata (an operator's mistake)."""
        blobs = self.service.blobs
        if isinstance(blobs, PostgresBlobStore):
            await blobs.db.write(
                lambda conn: conn.execute("DELETE FROM bag_blobs WHERE sha256 = ?", (sha256,))
            )
        else:
            blobs.path(sha256).unlink()

    def client(self, *, auth: bool = True, timeout: float = DEADLINE) -> httpx.AsyncClient:
        """An HTTP/1.1 httpx client for this server (with the API token)."""
        return http1_client(self.url, headers=AUTH if auth else None, timeout=timeout)

    @asynccontextmanager
    async def stream(self, body: dict[str, Any]) -> AsyncIterator[httpx.Response]:
        """The turn's streamed response; leaving the block disconnects."""
        async with (
            self.client() as client,
            client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
        ):
            yield response

    async def turn(
        self, message: str = "hello", *, chat_id: str | None = None, **fields: Any
    ) -> TurnRun:
        """Post one turn and read the whole answer."""
        body: dict[str, Any] = {"workspaceId": WORKSPACE, "message": message, **fields}
        if chat_id is not None:
            body["chatId"] = chat_id
        with trio.fail_after(DEADLINE):
            async with self.stream(body) as response:
                raw = await response.aread()
        run = TurnRun(response.status_code, response.headers, raw)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            run.events, run.comments = parse_sse(raw)
        return run

    async def chat(self, chat_id: str, workspace: str = WORKSPACE) -> dict[str, Any]:
        """``GET /api/assistant/chats/{id}`` (asserts 200)."""
        async with self.client() as client:
            response = await client.get(
                f"/api/assistant/chats/{chat_id}", params={"workspaceId": workspace}
            )
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    async def wait_chat(
        self, chat_id: str, predicate: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        """Poll the chat until ``predicate`` holds (deadline :data:`DEADLINE`)."""
        with trio.fail_after(DEADLINE):
            while True:
                chat = await self.chat(chat_id)
                if predicate(chat):
                    return chat
                await trio.sleep(0.05)

    async def shutdown(self, timeout: float = DEADLINE) -> None:
        """Run the serve loop's shutdown path and wait for it."""
        self._stop.set()
        with trio.fail_after(timeout):
            await self._stopped.wait()


def allow(model: ModelServer) -> list[Endpoint]:
    """What an isolated sandbox needs allowed to reach ``model`` on this host's loopback."""
    return [parse_endpoint(model.base_url.split("://", 1)[1].split("/", 1)[0])]


def chat_settings(data_dir: Path, **overrides: Any) -> ChatSettings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "api_token": API_TOKEN,
        "agent": scripted(),
        "runner_token": RUNNER_TOKEN,
        "shutdown_timeout": 10.0,
    }
    values.update(overrides)
    return ChatSettings(**values)


async def start_chat_server(
    nursery: trio.Nursery,
    data_dir: Path,
    *,
    embedded: bool = True,
    runner_settings: RunnerSettings | None = None,
    kill_grace: float | None = None,
    container_args: Sequence[str] = (),
    sandbox_allow: Sequence[Endpoint] = (),
    **overrides: Any,
) -> ChatServer:
    """Serve the chat backend on 127.0.0.1:0 in ``nursery`` (stopped by ``shutdown``).

    The embedded runner sandboxes containers with bwrap (the data dir hidden, the ACP
    agents' dir mounted), as ``sandstream serve`` does; with ``kill_grace`` it uses the
    local launcher with that grace instead (for tests of the local launcher's ``SIGTERM`` path).
    ``container_args`` are appended to the container's command line.
    Its sandboxes' network is isolated; ``sandbox_allow``: what else of this host they
    reach (a stand-in model server: :func:`allow`), as ``--sandbox-allow``.
    """
    settings = chat_settings(data_dir, embedded_runner=embedded, **overrides)
    store = await open_store(data_dir)
    blobs = store.blob_store(data_dir / "bag")
    await trio.to_thread.run_sync(blobs.ensure_dirs_sync)
    runner = None
    if embedded:
        runner = Runner(
            runner_settings
            or RunnerSettings(
                token=RUNNER_TOKEN,
                max_live=32,
                shutdown_timeout=5.0,
            ),
            BwrapLauncher(
                argv=(*DEFAULT_CONTAINER_ARGV, *container_args),
                stderr="discard",
                hidden_paths=[str(data_dir)],
                env={AGENTS_DIR_ENV: str(AGENTS_DIR)},
                extra_paths=[str(AGENTS_DIR)] if AGENTS_DIR.is_dir() else [],
                allowed=sandbox_allow,
            )
            if kill_grace is None
            else LocalSubprocessLauncher(stderr="discard", kill_grace=kill_grace),
        )
    service = ChatService(settings, store, blobs, runner)
    sessions = SessionSettings(data_dir=data_dir) if embedded else None
    app = create_chat_app(service, sessions=sessions)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 5.0
    server = ChatServer(url="", service=service, data_dir=data_dir, app=app)

    async def run(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve_chat(
                app, config, shutdown_trigger=server._stop.wait, task_status=task_status
            )
            server._stopped.set()
            await trio.sleep_forever()  # the store stays readable until the test ends
        finally:
            server._stopped.set()
            with trio.CancelScope(shield=True):
                await store.close()

    binds: list[str] = await nursery.start(run)
    server.url = binds[0].rstrip("/")
    return server


# -- reading streams ----------------------------------------------------------------------


class EventReader:
    """Reads a streamed SSE response event by event, keeping one byte iterator alive."""

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.aiter_bytes()
        self._parser = SSEParser()
        self._ready: list[ServerSentEvent] = []
        self.events: list[ServerSentEvent] = []

    async def next(self) -> ServerSentEvent | None:
        while not self._ready:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                return None
            self._ready += self._parser.feed(chunk)
        event = self._ready.pop(0)
        self.events.append(event)
        return event

    async def until(self, predicate: Callable[[ServerSentEvent], bool]) -> ServerSentEvent:
        while (event := await self.next()) is not None:
            if predicate(event):
                return event
        raise AssertionError(f"the stream ended first: {[e.event for e in self.events]}")


def running_step(event: ServerSentEvent) -> bool:
    return event.event == "step" and '"status":"running"' in event.data


# -- processes ---------------------------------------------------------------------------


def marked(marker_value: str) -> list[int]:
    """Live processes whose environment carries ``SANDSTREAM_TURN_ID=<marker_value>``."""
    return processes.with_env(TURN_MARKER_ENV, [marker_value])


async def wait_no_process(marker_value: str, timeout: float = DEADLINE) -> None:
    """Poll until no live process carries the turn marker; fail at the deadline."""
    with trio.move_on_after(timeout):
        while marked(marker_value):
            await trio.sleep(0.05)
    assert marked(marker_value) == [], f"turn {marker_value}: processes left"


async def kill_and_wait(pids: list[int], timeout: float = DEADLINE) -> None:
    """SIGKILL ``pids`` (a dead server's orphaned containers) and wait until they are gone."""
    processes.kill(pids)
    with trio.fail_after(timeout):
        while alive(pids):
            await trio.sleep(0.05)


def kill_marked(marker_value: str) -> None:
    """SIGKILL every process (and its group) carrying the turn marker (test cleanup)."""
    processes.kill(marked(marker_value))


def descendants(pid: int) -> list[int]:
    """Live (non-zombie) descendants of ``pid``."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    alive = []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return alive


# -- `sandstream serve` as a process -----------------------------------------------------


class ServeProcess(ServerProcess):
    """``sandstream serve`` as a real process; see :func:`start_serve_process`."""

    def client(self, token: str) -> httpx.AsyncClient:
        return http1_client(
            self.url, headers={"Authorization": f"Bearer {token}"}, timeout=DEADLINE
        )


_ACQUIRED: Final = re.compile(
    r'^sandstream_mover_lease_claims_total\{result="acquired"\} (\S+)$', re.MULTILINE
)


async def lease_holder(
    replicas: Sequence[ServeProcess], token: str
) -> tuple[ServeProcess, ServeProcess]:
    """Of two replicas running one turn, the one whose log mover claimed its session
    (the one that started it, unless the other's sweep came first), and the other;
    read from their metrics."""
    with trio.fail_after(DEADLINE):
        while True:
            for index, replica in enumerate(replicas):
                async with replica.client(token) as client:
                    metrics = (await client.get("/metrics")).text
                found = _ACQUIRED.search(metrics)
                if found and float(found[1]) > 0:
                    return replica, replicas[1 - index]
            await trio.sleep(0.02)


async def start_serve_process(
    nursery: trio.Nursery, data_dir: Path, config: dict[str, Any], *extra: str
) -> ServeProcess:
    """``sandstream serve --port 0`` with short leases and ``config`` as its agent, as a
    real process (SIGKILLed when ``nursery`` is cancelled; its stdout and stderr kept);
    returns once it listens. On this test's database (:mod:`.databases`):
    ``--database-url`` when PostgreSQL, and then, unless ``extra`` names one, a free
    port that is its ``--public-url``."""
    agent_config = data_dir.parent / f"agent-{len(list(data_dir.parent.iterdir()))}.json"
    agent_config.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDSTREAM_", "OPENAI_"))}
    argv = [
        str(Path(sys.executable).parent / "sandstream"),
        "serve",
        "--port", "0",
        "--data-dir", str(data_dir),
        "--agent-config", str(agent_config),
        "--lock-lease", "2",
        "--lock-heartbeat", "0.5",
        "--lease-ttl", "2",
        "--kill-grace", "0.5",
        *extra,
    ]  # fmt: skip
    database = database_url(data_dir)  # this test's PostgreSQL database, if it runs on one
    if database is not None:
        argv += ["--database-url", database]
        if "--public-url" not in extra:  # required with a shared database: its own address
            port = free_port()
            argv += ["--port", str(port), "--public-url", f"http://127.0.0.1:{port}"]
    return await ServeProcess.start(
        nursery,
        argv,
        listening=LISTENING,
        capture="both",
        env=env,
        stop_signal=signal.SIGKILL,
        deadline=DEADLINE,
    )


async def begin_dead_turn(store: SqlChatStore, text: str, *, lease_ms: int) -> TurnStart:
    """A turn as a server that died left it: begun on a new chat, its lock expiring
    ``lease_ms`` from now and renewed by nobody, no runner session."""
    now = now_ms()
    session_id = new_id("sess")
    return await store.begin_turn(
        TurnRequest(
            workspace_id=WORKSPACE,
            chat_id=None,
            workflow_id=None,
            text=text,
            attachment_ids=[],
            user_message_id=new_id("msg"),
            assistant_message_id=new_id("msg"),
            session_id=session_id,
            holder=f"srv_dead:{session_id}",
            lease_expires_at=now + lease_ms,
            tokens=list(mint_tokens(now).stored),
            now=now,
            replay_limit=20,
        )
    )


# -- what a scale-out test reads back -------------------------------------------------------


async def runner_output(runner_url: str, session_id: str) -> list[bytes]:
    """A session's whole output, read from its runner over the WebSocket."""
    chunks: list[bytes] = []

    async def deliver(batch: Batch | Passed) -> None:
        assert isinstance(batch, Batch)
        chunks.extend(split_chunks(batch.data))

    with trio.fail_after(DEADLINE):
        await RemoteSource(runner_url, RUNNER_TOKEN).follow(session_id, 0, deliver)
    return chunks


def output_message(output: list[bytes], stored: PersistedMessage) -> PersistedMessage:
    """The assistant message a session's whole ``output`` folds to, with ``stored``'s
    id and time, at the default limits: what the chat should have stored."""
    return fold_chunks(
        output,
        message_id=stored.id,
        created_at=stored.created_at,
        max_steps=DEFAULT_MAX_STEPS,
        max_step_bytes=DEFAULT_MAX_STEP_BYTES,
        max_line_bytes=DEFAULT_MAX_LINE_BYTES,
    )


async def runner_position(runner_url: str, session_id: str) -> int:
    """The cursor of a session's newest chunk now, as its runner's status says."""
    auth = {"Authorization": f"Bearer {RUNNER_TOKEN}"}
    async with http1_client(runner_url, headers=auth) as client:
        response = await client.get(f"/sessions/{session_id}/status")
    response.raise_for_status()
    return int(response.json()["last_chunk_id"])


async def settled_assistant(store: SqlChatStore, start: dict[str, Any]) -> PersistedMessage:
    """The assistant message of the turn ``start`` (its ``start`` frame) once it settled."""
    with trio.fail_after(DEADLINE):
        while (turn := await store.get_turn(start["sessionId"])) is None or (
            turn.state != "settled"
        ):
            await trio.sleep(0.05)
    messages = await store.get_messages(WORKSPACE, start["chatId"])
    [message] = [m for m in messages if m.id == start["assistantMessageId"]]
    return message
