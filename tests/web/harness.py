"""The web app's browser tests: a real chat server in a thread, real Chromium.

Playwright's sync API runs on the test's thread (it has its own event loop), so the
chat server — the real app on Hypercorn with the embedded runner and bwrap
containers, as :func:`tests.chat.harness.start_chat_server` builds it — runs in a
trio loop of its own on a second thread::

    with ServerThread(tmp_path / "data", agent=WEB_PLANS) as server:
        page = signed_in(context, server)

With ``proxied=True`` the browser reaches the server through a loopback TCP proxy
(:class:`tests.chat.mover_harness.Proxy`) whose connections :meth:`ServerThread.cut`
drops, as a network would.

Chromium is Debian's (``/usr/bin/chromium``); Playwright never downloads a browser.
Waits are Playwright's own (the element appears, under a deadline), never a fixed
sleep.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import httpx
import trio
from playwright.sync_api import Browser as PlaywrightBrowser
from playwright.sync_api import BrowserContext, Page, Playwright

from benchmarks.support.model_server import ModelScript, ModelServer, start_model_server
from benchmarks.support.model_wire import Reply
from sandstream.core.schemas import ConfigResponse, ScriptedAgent, ScriptedStep
from sandstream.server.chat import AgentProfile
from tests.chat.harness import (
    API_TOKEN,
    AUTH,
    DEADLINE,
    WORKSPACE,
    PlanByPrompt,
    allow,
    shell,
    start_chat_server,
)
from tests.chat.harness import write as write_step
from tests.chat.mover_harness import Proxy, start_proxy

CHROMIUM: Final = "/usr/bin/chromium"
CHROMIUM_ARGS: Final = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT_MS: Final = int(DEADLINE * 1000)
"""Playwright's deadline for any single wait, in ms."""

REPORT = "# Report\n\nWritten by the agent.\n"
PLAN = "# Plan\n\n1. Keep this file in the work dir.\n"
LIST_FILES = ScriptedStep(tool="list_files", args={"path": "."})
ANSWER = "**Done**: {prompt}\n\n- listed the work dir\n- wrote `output/report.md`"
ASKED = "**Ran** it <img src=x onerror=alert(1)> as you allowed, one word at a time: {prompt}"


def _plan(*steps: ScriptedStep, message: str = ANSWER, **kw: Any) -> ScriptedAgent:
    return ScriptedAgent(steps=list(steps), message=message, **kw)


def web_plans() -> AgentProfile:
    """The agent of the browser tests, its plan chosen by the prompt's first word.

    Any prompt: list the work dir, write ``output/report.md`` (written back), answer
    in Markdown. ``fail``: a failing step (a missing file) ends the turn with an error.
    ``long``: a step whose result is over the 16 KiB display bound. ``cat``: print
    the attached ``notes.txt``. ``slow``: a step, then a tool sleeping 300 s.
    ``nap``: a step, then a tool sleeping 5 s. ``keep``: write ``src/plan.md`` in the
    work dir (saved with the chat's workspace, not written back). ``ask``: reasons,
    asks before a shell step, then streams its answer (Markdown-looking, with markup
    to escape) a word every 0.2 s.
    """
    template = ConfigResponse(agent=_plan(LIST_FILES, write_step("output/report.md", REPORT)))
    return PlanByPrompt(
        template,
        {},
        "web test plans",
        plans={
            "fail": _plan(
                ScriptedStep(tool="read_file", args={"path": "missing.txt"}), stop_on_failure=True
            ),
            "long": _plan(shell("head -c 20000 /dev/zero | tr '\\0' x"), message="long: done"),
            "cat": _plan(shell("cat attachments/notes.txt"), message="read the notes"),
            "slow": _plan(LIST_FILES, shell("sleep 300"), message="slept"),
            "nap": _plan(LIST_FILES, shell("sleep 5"), message="napped: {prompt}"),
            "keep": _plan(write_step("src/plan.md", PLAN), message="kept: {prompt}"),
            "ask": _plan(
                ScriptedStep(tool="run_shell", args={"command": "echo asked"}, ask=True),
                message=ASKED,
                reasoning="Thinking <b>hard</b> about it.",
                delta_delay_sec=0.2,
            ),
        },
    )


class ServerThread:
    """The chat server (:func:`start_chat_server`) in a trio loop on its own thread.

    Entering starts it and waits until it listens; leaving runs its shutdown path
    (running turns settle, containers are reaped) and joins the thread. ``model``: a
    stand-in model server with this script is started first, and the server's agent is
    what the callable makes of it.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        proxied: bool = False,
        model: tuple[ModelScript, Callable[[ModelServer], AgentProfile]] | None = None,
        **overrides: Any,
    ) -> None:
        self.data_dir = data_dir
        self.overrides = overrides
        self.model = model
        self.proxied = proxied
        self.url = ""
        self._proxy: Proxy | None = None
        self._model: ModelServer | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chat-server", daemon=True)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(DEADLINE):
            raise AssertionError("the chat server did not start")
        if self._error is not None:
            raise AssertionError("the chat server did not start") from self._error
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(DEADLINE)
        assert not self._thread.is_alive(), "the chat server did not stop"

    def _run(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported by __enter__
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            if self.model is not None:  # a stand-in model server, and the agent using it
                script, agent = self.model
                model = self._model = await start_model_server(nursery, script)
                self.overrides["agent"] = agent(model)
                self.overrides["sandbox_allow"] = allow(model)
            server = await start_chat_server(nursery, self.data_dir, **self.overrides)
            self.url = server.url
            if self.proxied:
                self._proxy = await start_proxy(nursery, server.url)
                self.url = self._proxy.url
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            await server.shutdown()
            nursery.cancel_scope.cancel()

    def cut(self) -> None:
        """Drop every connection through the proxy now (``proxied=True`` only)."""
        assert self._proxy is not None and self._token is not None, "not proxied"
        trio.from_thread.run_sync(self._proxy.cut, trio_token=self._token)

    def release_model(self) -> None:
        """Let the stand-in model's held answers go on (``model`` given only)."""
        assert self._model is not None and self._token is not None, "no stand-in model"
        trio.from_thread.run_sync(self._model.release, trio_token=self._token)

    def model_replies(self) -> list[Reply]:
        """The stand-in model's answers so far (``model`` given only)."""
        assert self._model is not None, "no stand-in model"
        return list(self._model.replies)

    def api(self) -> httpx.Client:
        """A plain HTTP/1.1 client of the chat API, with the token."""
        return httpx.Client(base_url=self.url, headers=AUTH, timeout=DEADLINE)

    def chat(self, chat_id: str) -> dict[str, Any]:
        """``GET /api/assistant/chats/{id}`` (asserts 200)."""
        with self.api() as client:
            response = client.get(
                f"/api/assistant/chats/{chat_id}", params={"workspaceId": WORKSPACE}
            )
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data


def launch(playwright: Playwright, tmpdir: Path | None = None) -> PlaywrightBrowser:
    """Debian's Chromium, headless (never a downloaded browser); with ``tmpdir`` as its
    ``TMPDIR`` (its sockets' paths must stay short: a test's own is too long)."""
    env: dict[str, str | float | bool] | None = (
        None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    )
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=env)


def signed_in(
    context: BrowserContext, server: ServerThread | str, path: str = "/", token: str = API_TOKEN
) -> Page:
    """A new page of ``context`` on the app of ``server`` (or the server at that base
    URL), signed in to the test workspace with ``token`` by typing."""
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto((server if isinstance(server, str) else server.url) + path)
    page.fill("#token", token)
    page.fill("#workspace", WORKSPACE)
    page.click("#signin-form button[type=submit]")
    page.wait_for_selector("#app:not([hidden])")
    return page


def assistant(page: Page, status: str) -> str:
    """The selector of the last assistant message once it has ``status``; waits for it."""
    selector = f'article.message-assistant[data-status="{status}"]'
    page.wait_for_selector(selector)
    return selector


def send(page: Page, text: str) -> None:
    """Type ``text`` in the message box and press Enter."""
    page.fill("#message", text)
    page.press("#message", "Enter")


def thread_html(page: Page) -> str:
    """The rendered thread: every message's DOM, as HTML."""
    return page.inner_html("#messages")


def chat_id(page: Page) -> str:
    """The open chat's id, from the address."""
    url: str = page.evaluate("location.hash")
    assert url.startswith("#chat="), url
    return url.removeprefix("#chat=")
