"""Live text and permission requests in Chromium: the answer streams in word by word,
the reasoning is folded away, a permission card's buttons answer the request (POST
/api/assistant/chats/{chatId}/permissions/{requestId}) and every viewer sees the
outcome; a reload while the request is pending shows it pending."""

from __future__ import annotations

from playwright.sync_api import BrowserContext, Page

from tests.web.harness import ServerThread, assistant, chat_id, send, signed_in, thread_html

CARD = "article.message-assistant .permission"
PENDING = f"{CARD}.permission-pending"
STREAMING = "article.message-assistant[data-status=running] .answer.streaming"


def _outcome(page: Page, reply: str) -> None:
    page.wait_for_selector(f'{CARD}.permission-resolved .permission-outcome[data-reply="{reply}"]')


def test_a_permission_answered_in_the_browser_and_the_answer_streaming_in(
    context: BrowserContext, server: ServerThread
) -> None:
    page = signed_in(context, server)
    send(page, "ask away")
    page.wait_for_selector(PENDING)
    assert page.inner_text(f"{CARD} .permission-title") == "Run run_shell?"
    labels = page.locator(f"{PENDING} button").all_inner_texts()
    assert labels == ["Allow once", "Always allow", "Reject"]
    assert page.inner_text("#status") == "Waiting for your answer…"

    page.click(f'{PENDING} button[data-reply="once"]')
    _outcome(page, "once")
    assert page.inner_text(f"{CARD} .permission-outcome") == "Allowed once"
    assert page.locator(f"{CARD} button").count() == 0  # answered: no buttons left

    # The answer streams in: a part of it, as plain text, while the turn runs.
    page.wait_for_selector(STREAMING)
    partial = page.inner_text(STREAMING).rstrip()
    raw = "**Ran** it <img src=x onerror=alert(1)> as you allowed, one word at a time: ask away"
    assert partial and raw.startswith(partial)
    final = raw.replace("**", "")

    done = assistant(page, "complete")
    assert page.inner_text(f"{done} .answer") == final
    assert page.locator(f"{done} .answer strong").inner_text() == "Ran"  # Markdown once done
    assert page.locator("#messages img").count() == 0  # the markup stayed text
    reasoning = page.locator(f"{done} details.reasoning")
    assert reasoning.get_attribute("open") is None  # folded away
    reasoning.locator("summary").click()
    assert reasoning.locator(".reasoning-text").inner_text() == "Thinking <b>hard</b> about it."
    steps = page.locator(f"{done} .step-succeeded .step-name").all_inner_texts()
    assert steps == ["run_shell"]

    # A reload draws the stored message: the same card, outcome and answer.
    live = thread_html(page)
    page.reload()
    stored = assistant(page, "complete")
    _outcome(page, "once")
    assert page.inner_text(f"{stored} .answer") == final
    assert "Allowed once" in live


def test_a_reload_shows_the_request_pending_and_every_viewer_sees_its_outcome(
    context: BrowserContext, server: ServerThread
) -> None:
    first = signed_in(context, server)
    send(first, "ask again")
    first.wait_for_selector(PENDING)
    first.reload()
    first.wait_for_selector(PENDING)  # still pending, its buttons live
    assert first.locator(f"{PENDING} button:enabled").count() == 3
    second = signed_in(context, server, f"/#chat={chat_id(first)}")
    second.wait_for_selector(PENDING)

    second.click(f'{PENDING} button[data-reply="reject"]')
    for page in (first, second):
        _outcome(page, "reject")
        assert page.inner_text(f"{CARD} .permission-outcome") == "Rejected"
        done = assistant(page, "complete")
        assert page.locator(f"{done} .step-failed .step-name").all_inner_texts() == ["run_shell"]


def test_always_is_kept_for_the_chat_and_revoked_from_its_list(
    context: BrowserContext, server: ServerThread
) -> None:
    page = signed_in(context, server)
    send(page, "ask away")
    page.wait_for_selector(PENDING)
    assert page.locator("#grants").is_hidden()
    page.click(f'{PENDING} button[data-reply="always"]')
    _outcome(page, "always")
    assistant(page, "complete")
    page.wait_for_selector("#grants:not([hidden])")
    page.click("#grants summary")
    assert page.locator("#grant-list .grant-title").all_inner_texts() == ["Run run_shell?"]

    # The next turn asks nobody: its card says a grant answered it.
    send(page, "ask away again")
    granted = "article.message-assistant >> nth=1"
    page.wait_for_selector(f"{granted} >> .permission-resolved")
    page.locator('article.message-assistant[data-status="complete"]').nth(1).wait_for()
    outcome = page.locator(f"{granted} >> .permission-outcome")
    assert outcome.inner_text() == "Allowed by an earlier 'always'"
    live = thread_html(page)
    page.reload()
    page.locator('article.message-assistant[data-status="complete"]').nth(1).wait_for()
    assert thread_html(page) == live  # the stored message says so too

    page.wait_for_selector("#grants:not([hidden])")
    page.click("#grants summary")
    page.click("#grant-list button")
    page.wait_for_selector("#grants[hidden]", state="attached")
