"""Signing in to the web app: the examples' workspace by default, the app shown only
once it is ready, and the chat list's counts in words a reader expects."""

from __future__ import annotations

import re
import time

import httpx
from playwright.sync_api import BrowserContext, Route

from tests.chat.harness import API_TOKEN, AUTH, DEADLINE, WORKSPACE
from tests.web.harness import WAIT_MS, ServerThread, signed_in

LISTING = re.compile(r"/api/assistant/chats\?")


def test_the_workspace_field_defaults_to_the_examples_one(
    context: BrowserContext, server: ServerThread
) -> None:
    page = context.new_page()
    page.goto(server.url)
    assert page.input_value("#workspace") == "ws1"


def test_the_app_shows_only_once_its_chat_list_and_first_route_are_done(
    context: BrowserContext, server: ServerThread
) -> None:
    """Shown earlier (as it was), a file attached in that moment was dropped when the
    first route cleared the pending files — what a slow server made of the upload test."""
    listings: list[Route] = []

    def hold_the_second(route: Route) -> None:
        listings.append(route)
        if len(listings) != 2:  # the first checks the token; the second fills the list
            route.continue_()

    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.route(LISTING, hold_the_second)
    page.goto(server.url)
    page.fill("#token", API_TOKEN)
    page.fill("#workspace", WORKSPACE)
    page.click("#signin-form button[type=submit]")
    deadline = time.monotonic() + DEADLINE
    while len(listings) < 2:
        assert time.monotonic() < deadline, "the chat list was never asked for"
        page.wait_for_timeout(10)  # lets Playwright deliver the route events
    assert page.locator("#app").is_hidden()
    listings[1].continue_()
    page.wait_for_selector("#app:not([hidden])")


def test_a_chat_of_one_message_says_one_message(
    context: BrowserContext, server: ServerThread
) -> None:
    with (
        httpx.Client(base_url=server.url, headers=AUTH, timeout=DEADLINE) as client,
        client.stream(
            "POST",
            "/api/assistant/chat/stream",
            json={"workspaceId": WORKSPACE, "message": "slow one"},
        ) as turn,
    ):
        start = next(turn.iter_lines())  # the turn runs: its user message alone is stored
        assert start.startswith("id: 0")
        page = signed_in(context, server)
        meta = page.locator(".chat-link .chat-meta").first.inner_text()
        chat_id = page.locator(".chat-link").first.get_attribute("data-chat-id")
        client.post(f"/api/assistant/chats/{chat_id}/interrupt", params={"workspaceId": WORKSPACE})
    assert meta.startswith("1 message ·"), meta
