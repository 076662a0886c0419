"""The live controls of a running turn in Chromium: reload mid-turn resumes, a second
tab shows the same turn, stop, and a follow-up while the turn runs.

They drive the live-turn routes of the chat on runner sessions: ``GET
/api/assistant/chats/{chatId}/stream`` (join from ``start``, or after ``?cursor=``;
``204`` when nothing is live), ``POST …/interrupt`` and ``POST …/messages``.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil
from playwright.sync_api import BrowserContext, Page

from tests.chat.harness import DEADLINE
from tests.web.harness import (
    ServerThread,
    assistant,
    chat_id,
    send,
    signed_in,
    thread_html,
    web_plans,
)

SLEEPING = (
    "article.message-assistant[data-status=running] .step-running .step-name:text('run_shell')"
)
"""The running turn's sleeping tool, shown as running."""


def wait_sleeping(page: Page) -> None:
    """Wait until the page shows the slow plan's tool as running and its ``sleep 300``
    runs: the step is drawn as soon as the container starts the tool, whose own
    interpreter then starts ``sleep`` (a loaded machine takes a while for that)."""
    page.wait_for_selector(SLEEPING)
    deadline = time.monotonic() + DEADLINE
    while not sleeping_tools():
        assert time.monotonic() < deadline, "the turn's tool never started sleeping"
        time.sleep(0.05)


def sleeping_tools() -> list[int]:
    """Live processes under this test run of the slow plan's tool (``sleep 300``)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.cmdline()[:2] == ["sleep", "300"] and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


def wait_no_sleeping_tool() -> None:
    """Poll until no ``sleep 300`` runs (the stopped turn's container is gone)."""
    deadline = time.monotonic() + DEADLINE
    while sleeping_tools():
        assert time.monotonic() < deadline, "the stopped turn's tool still runs"
        time.sleep(0.05)


def test_a_reload_mid_turn_resumes_the_live_turn(
    context: BrowserContext, server: ServerThread
) -> None:
    page = signed_in(context, server)
    send(page, "slow turn to reload")
    wait_sleeping(page)
    before = page.locator("article.message-assistant .step").count()

    page.reload()
    wait_sleeping(page)  # the same turn, still running, drawn again from its frames
    assert page.locator("article.message-assistant .step").count() == before
    assert page.locator("article.message-user").count() == 1
    assert sleeping_tools(), "the reload stopped the turn's tool"

    page.click("#stop")
    page.wait_for_selector("article.message-assistant:not([data-status=running])")
    page.wait_for_selector("#stop", state="hidden")


def test_a_dropped_connection_rejoins_after_the_last_frame_seen(
    context: BrowserContext, tmp_path: Path
) -> None:
    with ServerThread(tmp_path / "data", proxied=True, agent=web_plans()) as server:
        page = signed_in(context, server)
        send(page, "slow turn through a flaky network")
        wait_sleeping(page)
        live = thread_html(page)

        with page.expect_response(lambda r: "/stream?" in r.url) as rejoined:
            server.cut()  # the turn's stream drops; the turn runs on
        response = rejoined.value
        assert response.status == 200
        cursor = parse_qs(urlsplit(response.url).query)["cursor"]
        assert int(cursor[0]) > 0, response.url  # after the frames it had drawn
        assert sleeping_tools(), "the dropped connection stopped the turn's tool"
        assert thread_html(page) == live  # nothing drawn twice, nothing lost
        assert page.locator("#alert").inner_text() == ""

        page.click("#stop")  # its terminal comes on the rejoined stream
        stopped = assistant(page, "interrupted")
        assert page.locator(f"{stopped} .step-cancelled .step-name").inner_text() == "run_shell"
        live = thread_html(page)
        page.reload()
        page.wait_for_selector(stopped)
        assert thread_html(page) == live


def test_a_second_tab_shows_the_same_turn_live(
    context: BrowserContext, server: ServerThread
) -> None:
    first = signed_in(context, server)
    send(first, "slow turn for two tabs")
    wait_sleeping(first)

    second = signed_in(context, server, f"/#chat={chat_id(first)}")
    wait_sleeping(second)
    send(first, "a word from the first tab")  # a follow-up, shown in both
    second.wait_for_selector("article.message-user:has-text('a word from the first tab')")
    first.click("#stop")
    for page in (first, second):
        page.wait_for_selector("article.message-assistant:not([data-status=running])")
    assert thread_html(second) == thread_html(first)


def test_stop_interrupts_the_turn_keeps_its_steps_and_the_next_turn_runs_at_once(
    context: BrowserContext, server: ServerThread
) -> None:
    page = signed_in(context, server)
    send(page, "slow turn to stop")
    wait_sleeping(page)
    page.keyboard.press("Escape")  # the message box has the focus: Escape is stop
    stopped = page.locator("article.message-assistant").first
    page.wait_for_selector("article.message-assistant:not([data-status=running]) .turn-error")
    assert stopped.locator(".step-cancelled .step-name").inner_text() == "run_shell"
    assert stopped.locator(".step-succeeded .step-name").inner_text() == "list_files"
    page.wait_for_selector("#stop", state="hidden")
    live = thread_html(page)

    send(page, "right after the stop")  # no 409: the chat is free at once
    page.wait_for_selector("article.message-assistant:nth-of-type(4)[data-status=complete]")
    wait_no_sleeping_tool()
    page.reload()
    page.wait_for_selector("article.message-assistant:nth-of-type(4)[data-status=complete]")
    assert page.locator("article.message").nth(1).evaluate("e => e.outerHTML") in live


def test_a_follow_up_while_the_turn_runs_is_stored_as_a_user_message(
    context: BrowserContext, server: ServerThread
) -> None:
    page = signed_in(context, server)
    send(page, "nap a little")
    page.wait_for_selector("article.message-assistant[data-status=running] .step")
    assert page.locator("#send").inner_text() == "Send follow-up"
    send(page, "and one more thing")
    page.wait_for_selector("article.message-user:has-text('and one more thing')")
    assert page.locator("#alert").inner_text() == ""
    assistant(page, "complete")

    stored = server.chat(chat_id(page))["messages"]
    texts = [m["content"][0]["text"] for m in stored if m["role"] == "user"]
    assert texts == ["nap a little", "and one more thing"]
