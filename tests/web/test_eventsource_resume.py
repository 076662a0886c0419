"""Real EventSource clients resume a runner session's and a chat turn's stream by
themselves, and stop once it has ended: Chromium's own ``EventSource`` and the npm
``eventsource`` package (tests/node/eventsource_client.mjs).

Each opens its stream with ``?cursor=1`` in the URL, as a page that resumes would.
The test drops the connection (a loopback proxy cut) while the turn sleeps in a tool;
the client reconnects with that URL unchanged plus ``Last-Event-ID``, which wins: it
gets exactly the frames after the last one it received. When the stream ends the
client reconnects once more, at the end of an ended stream, and the ``204`` stops it
for good. So: two connections, the frames after cursor 1 each once, then closed.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from playwright.sync_api import Browser

from sandstream.core.schemas import ScriptedAgent
from sandstream.core.sse_parser import SSEParser
from tests.chat.harness import AUTH, DEADLINE, RUNNER_TOKEN, WORKSPACE, plans, shell
from tests.web.harness import WAIT_MS, ServerThread

ROOT: Final = Path(__file__).resolve().parents[2]
NODE_CLIENT: Final = ROOT / "tests" / "node" / "eventsource_client.mjs"
CHAT_EVENTS: Final = ["start", "step", "delta", "permission", "result", "error", "files", "done"]
RUNNER_EVENTS: Final = ["control"]
PAUSING: Final = ScriptedAgent(
    steps=[shell("echo one"), shell("sleep 4"), shell("echo two")], message="resumed"
)
"""A turn with a pause in the middle: the connection is cut while it sleeps."""

Frame = tuple[str, str, str]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    """The chat server (and its embedded runner's sessions) behind a cuttable proxy."""
    with ServerThread(tmp_path / "data", proxied=True, agent=plans(pause=PAUSING)) as running:
        yield running


class Stream:
    """One stream to resume: its URL (``?cursor=1``), the Authorization an EventSource
    sends with it (``None``: a stream token in the URL), the named events it carries,
    and the frames it holds after cursor 1 once ended (read with the API)."""

    def __init__(self, server: ServerThread, target: str) -> None:
        self.server = server
        self.target = target
        body = {"workspaceId": WORKSPACE, "message": "pause here"}
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=DEADLINE) as client:
            with client.stream("POST", "/api/assistant/chat/stream", json=body) as response:
                assert response.status_code == 200
                self.chat_id = response.headers["X-Chat-Id"]
                self.session_id = response.headers["X-Session-Id"]
                for line in response.iter_lines():  # a step: cursor 1 exists
                    if line == "event: step":
                        break
            # The POST is gone; the turn goes on (onDisconnect: continue).
            if target == "runner":
                self.path = f"/sessions/{self.session_id}/stream"
                self.authorization: str | None = f"Bearer {RUNNER_TOKEN}"
                self.events = RUNNER_EVENTS
                self.query = "cursor=1"
            else:
                minted = client.post(
                    f"/api/assistant/chats/{self.chat_id}/stream-token",
                    params={"workspaceId": WORKSPACE},
                )
                assert minted.status_code == 201, minted.text
                self.path = f"/api/assistant/chats/{self.chat_id}/stream"
                self.authorization = None
                self.events = CHAT_EVENTS
                token = minted.json()["token"]
                self.query = f"workspaceId={WORKSPACE}&token={token}&cursor=1"

    @property
    def url(self) -> str:
        return f"{self.server.url}{self.path}?{self.query}"

    def frames_after_1(self) -> list[Frame]:
        """Every frame after cursor 1 of the ended stream, read in one go: (event, id,
        data), controls left out (their number depends on when a reader caught up)."""
        auth = AUTH if self.authorization is None else {"Authorization": self.authorization}
        with httpx.Client(base_url=self.server.url, headers=auth, timeout=DEADLINE) as client:
            response = client.get(
                self.path,
                params={"workspaceId": WORKSPACE, "cursor": "1"},
                headers={"Accept": "text/event-stream"},
            )
        assert response.status_code == 200, response.text
        parser = SSEParser()
        events = parser.feed(response.content) + parser.close()
        return [(e.event, e.id, e.data) for e in events if e.event != "control"]


def sleeping(frame: dict[str, Any]) -> bool:
    """The frame of the ``sleep 4`` step, running."""
    data = frame.get("data", "")
    return '"status":"running"' in data and "sleep 4" in data


def check(stream: Stream, seen: list[dict[str, Any]], opens: int) -> None:
    """Two connections (the first, and the resume after the cut), and the frames after
    cursor 1 each once, in order; the runner's last control said ``streamClosed``."""
    frames = [(f["event"], f["id"], f["data"]) for f in seen if f["event"] != "control"]
    assert frames == stream.frames_after_1()
    assert opens == 2
    if stream.target == "runner":
        assert json.loads(seen[-1]["data"]).get("streamClosed") is True, seen[-1]
    else:
        assert frames[-1][0] == "done"


WATCH = """([url, names]) => {
  window.seen = [];
  window.opens = 0;
  const source = new EventSource(url);
  window.source = source;
  source.addEventListener('open', () => { window.opens += 1; });
  for (const name of ['message', ...names]) {
    source.addEventListener(name, event => {
      if (event.data !== undefined) {
        window.seen.push({event: name, id: event.lastEventId, data: event.data});
      }
    });
  }
}"""


@pytest.mark.parametrize("target", ["runner", "chat"])
def test_chromiums_eventsource_resumes_once_and_stops_at_the_end(
    browser: Browser, server: ServerThread, target: str
) -> None:
    stream = Stream(server, target)
    headers = {} if stream.authorization is None else {"Authorization": stream.authorization}
    context = browser.new_context(extra_http_headers=headers)
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(server.url + "/")  # the EventSource's requests are same-origin
        page.evaluate(WATCH, [stream.url, stream.events])
        page.wait_for_function(
            """() => window.seen.some(f => f.data.includes('"status":"running"')
                                           && f.data.includes('sleep 4'))"""
        )
        server.cut()
        page.wait_for_function("() => window.source.readyState === EventSource.CLOSED")
        seen: list[dict[str, Any]] = page.evaluate("window.seen")
        opens: int = page.evaluate("window.opens")
    finally:
        context.close()
    check(stream, seen, opens)
    assert sum(map(sleeping, seen)) == 1


@pytest.mark.parametrize("target", ["runner", "chat"])
def test_the_npm_eventsource_resumes_once_and_stops_at_the_end(
    node: Path, server: ServerThread, target: str
) -> None:
    stream = Stream(server, target)
    options = {"url": stream.url, "events": stream.events, "authorization": stream.authorization}
    seen: list[dict[str, Any]] = []
    opens = 0
    closed: dict[str, Any] = {}
    with subprocess.Popen(
        [str(node), str(NODE_CLIENT), json.dumps(options)], stdout=subprocess.PIPE, text=True
    ) as client:
        watchdog = threading.Timer(DEADLINE, client.kill)  # a client that never stops fails
        watchdog.start()
        try:
            assert client.stdout is not None
            for line in client.stdout:
                item = json.loads(line)
                if "open" in item:
                    opens = item["open"]
                elif "closed" in item:
                    closed = item
                else:
                    seen.append(item)
                    if sleeping(item):
                        server.cut()
            assert client.wait(DEADLINE) == 0
        finally:
            watchdog.cancel()
            client.kill()
    assert closed == {"closed": True, "status": 204}
    check(stream, seen, opens)
    assert sum(map(sleeping, seen)) == 1
