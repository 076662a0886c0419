"""Fixtures of the web app's browser tests: Chromium per module, a server per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, sync_playwright

from tests.web.harness import ServerThread, launch, web_plans


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, shared by the module's tests (closed after them)."""
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser profile (its own sessionStorage), desktop size."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def browser_context_phone(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser profile the size of a phone (375 x 740, touch)."""
    context = browser.new_context(
        viewport={"width": 375, "height": 740}, is_mobile=True, has_touch=True
    )
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    """The chat server with the embedded runner and :func:`web_plans` as its agent."""
    with ServerThread(tmp_path / "data", agent=web_plans()) as running:
        yield running
