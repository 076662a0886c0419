"""The chat web app in real Chromium against a real chat server (embedded runner, bwrap).

A full turn with steps and a written-back file; attachments; a reopened chat renders
exactly the DOM the live stream rendered; keyboard use; phone width; sign-in; stop.
``SANDSTREAM_WEB_SCREENSHOTS=docs/images`` also saves the README's screenshots.
"""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import BrowserContext, Page

from tests.chat.harness import WORKSPACE
from tests.web.harness import (
    REPORT,
    ServerThread,
    assistant,
    chat_id,
    send,
    signed_in,
    thread_html,
)

XSS = "<img src=x onerror=\"document.title='owned'\"> and <script>document.title='owned'</script>"


def screenshot(page: Page, name: str, tmp_path: Path) -> None:
    """Save a screenshot in the test's dir, and in ``$SANDSTREAM_WEB_SCREENSHOTS`` if set."""
    page.screenshot(path=str(tmp_path / name))
    folder = os.environ.get("SANDSTREAM_WEB_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / name))


def test_a_full_turn_shows_its_steps_answer_and_written_file(
    context: BrowserContext, server: ServerThread, tmp_path: Path
) -> None:
    page = signed_in(context, server)
    send(page, f"hello {XSS}")

    done = assistant(page, "complete")
    steps = page.locator(f"{done} .step")
    assert steps.count() == 2
    assert [steps.nth(i).get_attribute("class") for i in range(2)] == ["step step-succeeded"] * 2
    assert page.locator(f"{done} .step-name").all_inner_texts() == ["list_files", "write_file"]
    assert all(t.endswith(("ms", " s")) for t in page.locator(".step-duration").all_inner_texts())
    # Args and results open on demand.
    page.click(f"{done} .step:nth-child(2) summary")
    args = page.locator(f"{done} .step:nth-child(2) .payload").first.inner_text()
    assert '"path": "output/report.md"' in args
    # The answer is Markdown; the user's text inside it stays text.
    answer = page.locator(f"{done} .answer")
    assert answer.locator("strong").inner_text() == "Done"
    assert answer.locator("li").all_inner_texts() == [
        "listed the work dir",
        "wrote output/report.md",
    ]
    assert answer.locator("code").inner_text() == "output/report.md"
    assert "<img src=x" in answer.inner_text()
    assert page.locator("#messages img, #messages script").count() == 0
    assert page.title() == "sandstream"
    # The written-back file: a chip on the answer, downloadable.
    chip = page.locator(f"{done} .files .chip")
    assert chip.locator(".chip-name").inner_text() == "report.md"
    with page.expect_download() as download:
        chip.click()
    saved = tmp_path / "report.md"
    download.value.save_as(saved)
    assert saved.read_text() == REPORT
    # The chat is listed, titled by its first message, newest first.
    page.wait_for_selector(".chat-link[aria-current=page]")
    assert page.locator(".chat-link .chat-title").first.inner_text().startswith("hello <img")

    stored = server.chat(chat_id(page))["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert page.locator("article.message").evaluate_all(
        "els => els.map(e => e.dataset.messageId)"
    ) == [m["id"] for m in stored]


def test_a_reopened_chat_renders_exactly_what_the_live_stream_rendered(
    context: BrowserContext, server: ServerThread, tmp_path: Path
) -> None:
    """Turns of every kind in one chat: an answer with a file, a failed step and an
    error, a result over the display bound (truncated with its size)."""
    page = signed_in(context, server)
    send(page, "first turn")
    assistant(page, "complete")
    send(page, "fail on purpose")
    failed = assistant(page, "failed")
    send(page, "long output please")
    page.wait_for_selector("article.message-assistant:nth-of-type(6)[data-status=complete]")

    error = page.locator(f"{failed} .turn-error")
    assert "[step_failed]" in error.inner_text()
    assert page.locator(f"{failed} .step-failed .step-error").count() == 1
    page.click("article.message-assistant:nth-of-type(6) .step summary")
    truncated = page.locator("article.message-assistant:nth-of-type(6) .truncated").inner_text()
    assert "truncated" in truncated and "KiB in full" in truncated
    page.click("article.message-assistant:nth-of-type(6) .step summary")  # closed again
    live = thread_html(page)

    page.reload()
    page.wait_for_selector("article.message-assistant:nth-of-type(6)[data-status=complete]")
    assert thread_html(page) == live
    screenshot(page, "web-history.png", tmp_path)

    # Opened from the list in another tab (a new sign-in): the same again.
    other = signed_in(context, server)
    other.click(".chat-link")
    other.wait_for_selector("article.message-assistant:nth-of-type(6)[data-status=complete]")
    assert thread_html(other) == live


def test_attachments_upload_to_the_bag_show_as_chips_and_reach_the_sandbox(
    context: BrowserContext, server: ServerThread, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("the notes travelled\n")
    page = signed_in(context, server)
    page.set_input_files("#file-input", str(notes))
    page.wait_for_selector("#pending-files .chip:not(.uploading)")
    assert page.locator("#pending-files .chip-name").inner_text() == "notes.txt"
    send(page, "cat the notes")

    done = assistant(page, "complete")
    live = thread_html(page)
    user = page.locator("article.message-user")
    assert user.locator(".chip-name").inner_text() == "notes.txt"
    assert page.locator("#pending-files .chip").count() == 0
    names = page.locator(f"{done} .step-name").all_inner_texts()
    assert names == ["download_attachments", "run_shell"]
    page.click(f"{done} .step:nth-child(2) summary")
    result = page.locator(f"{done} .step:nth-child(2) .payload").nth(1).inner_text()
    assert "the notes travelled" in result
    stored = server.chat(chat_id(page))["messages"]
    assert [a["name"] for a in stored[0]["fileAttachments"]] == ["notes.txt"]
    page.reload()
    assistant(page, "complete")
    assert thread_html(page) == live


def test_the_app_is_usable_from_the_keyboard(context: BrowserContext, server: ServerThread) -> None:
    page = context.new_page()
    page.goto(server.url)
    page.wait_for_selector("#token:focus")
    page.keyboard.type("test-api-token")
    page.keyboard.press("Tab")
    page.keyboard.press("Control+A")
    page.keyboard.type(WORKSPACE)
    page.keyboard.press("Enter")
    page.wait_for_selector("#app:not([hidden])")
    page.focus("#message")
    page.keyboard.type("two")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("lines")
    page.keyboard.press("Enter")
    done = assistant(page, "complete")
    assert page.locator("article.message-user .user-text").inner_text() == "two\nlines"
    # A step opens with the keyboard: focus its summary, press Enter.
    page.locator(f"{done} .step summary").first.focus()
    page.keyboard.press("Enter")
    assert page.locator(f"{done} .step details").first.get_attribute("open") == ""


def test_a_phone_width_screen_has_no_horizontal_scroll(
    browser_context_phone: BrowserContext, server: ServerThread
) -> None:
    page = signed_in(browser_context_phone, server)
    assert page.locator("#sidebar").is_hidden()
    send(page, "long " + "unbroken" * 40 + " `" + "code" * 40 + "`")
    done = assistant(page, "complete")
    page.click(f"{done} .step summary")
    page.wait_for_selector(f"{done} .payload")
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], widths
    page.click("#toggle-chats")
    assert page.locator("#sidebar").is_visible()
    page.click(".chat-link")
    assert page.locator("#sidebar").is_hidden()


def test_a_wrong_token_is_refused_at_sign_in(context: BrowserContext, server: ServerThread) -> None:
    page = context.new_page()
    page.goto(server.url)
    page.fill("#token", "not-the-token")
    page.click("#signin-form button[type=submit]")
    page.wait_for_selector("#signin-error:text('refused')")
    assert page.locator("#app").is_hidden()


def test_stop_ends_the_turn_and_the_next_one_runs(
    context: BrowserContext, server: ServerThread, tmp_path: Path
) -> None:
    page = signed_in(context, server)
    send(page, "Summarize the work dir in a report")
    assistant(page, "complete")
    send(page, "slow turn")
    running = "article.message-assistant[data-status=running]"
    page.wait_for_selector(f"{running} .step-running .step-name:text('run_shell')")
    screenshot(page, "web-live-turn.png", tmp_path)
    page.click("#stop")
    stopped = page.locator("article.message-assistant").nth(1)
    page.wait_for_selector("article.message-assistant:not([data-status=running]) .turn-error")
    assert stopped.locator(".step-running").count() == 0
    page.wait_for_selector("#stop", state="hidden")
    send(page, "after the stop")
    page.wait_for_selector("article.message-assistant:nth-of-type(6)[data-status=complete]")
    stored = server.chat(chat_id(page))["messages"]
    statuses = [m.get("status") for m in stored]
    assert statuses == [None, "complete", None, "interrupted", None, "complete"]


def test_a_second_tab_shows_the_turns_another_tab_runs(
    context: BrowserContext, server: ServerThread
) -> None:
    """Opened mid-turn, the second tab joins the turn live; a later turn reaches it
    over the tabs' channel. Both end with the same thread."""
    first = signed_in(context, server)
    send(first, "nap while the other tab opens")
    first.wait_for_selector("article.message-assistant .step-running")
    second = signed_in(context, server, f"/#chat={chat_id(first)}")
    for page in (first, second):
        page.wait_for_selector("article.message-assistant[data-status=complete]")
    assert thread_html(second) == thread_html(first)

    send(first, "and a second turn")
    done = "article.message-assistant:nth-of-type(4)[data-status=complete]"
    for page in (first, second):
        page.wait_for_selector(done)
    assert thread_html(second) == thread_html(first)


def test_chats_are_listed_newest_first_and_new_chat_starts_an_empty_thread(
    context: BrowserContext, server: ServerThread
) -> None:
    page = signed_in(context, server)
    send(page, "the older chat")
    assistant(page, "complete")
    older = chat_id(page)
    page.click("#new-chat")
    assert page.locator("#messages article").count() == 0
    assert page.evaluate("document.activeElement.id") == "message"
    send(page, "the newer chat")
    page.wait_for_selector("#chat-list li:first-child .chat-title:text-is('the newer chat')")
    newer = chat_id(page)
    assert newer != older
    listed = page.locator(".chat-link").evaluate_all("els => els.map(e => e.dataset.chatId)")
    assert listed == [newer, older]
    page.click(f'.chat-link[data-chat-id="{older}"]')
    page.wait_for_selector("article.message-user:has-text('the older chat')")
    assert chat_id(page) == older
    assert page.locator("#messages article").count() == 2
