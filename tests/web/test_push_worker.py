"""The web app's service worker in Chromium: a push message delivered through the
DevTools protocol (``ServiceWorker.deliverPushMessage``, as the browser's push service
would) shows one notification with the chat's collapse key as its tag, a newer alert
of the same chat replaces it, and a dismiss push closes it. The "Notify me" toggle shows
when the server has a VAPID key. (Subscribing itself needs the browser's push service,
which a headless Chromium offline has not.)

Chromium forgets a notification that is being shown while ``getNotifications`` runs, so
the test reads the notifications only once the worker's ``showNotification`` has resolved:
it counts them from inside the worker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, CDPSession, Page, Worker

from sandstream.server.chat.push.notification import Notification
from sandstream.server.chat.push.senders import web_push_payload
from sandstream.server.chat.push.settings import PushSettings
from sandstream.server.chat.push.webpush import VapidKey
from tests.web.harness import WAIT_MS, ServerThread, signed_in, web_plans

SHOWN = """async () => (await (await navigator.serviceWorker.ready).getNotifications())
    .map((n) => ({ tag: n.tag, title: n.title, body: n.body }))"""
REGISTER = """async () => {
    await navigator.serviceWorker.register("/sw.js", { scope: "/" });
    return (await navigator.serviceWorker.ready).scope;
}"""
COUNT_SHOWN = """() => {
    const registration = self.registration;
    const show = registration.showNotification;
    self.shownCount = 0;
    registration.showNotification = async (...args) => {
        await show.apply(registration, args);
        self.shownCount += 1;
    };
}"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(tmp_path / "data", agent=web_plans()) as running:
        yield running


def alert(chat_id: str, title: str, body: str) -> str:
    data = {"kind": "alert", "pushId": "push_1", "chatId": chat_id, "workspaceId": "ws"}
    notification = Notification(title=title, body=body, collapse_key=f"chat-{chat_id}", data=data)
    return web_push_payload(notification).decode()


def dismiss(chat_id: str) -> str:
    data = {"kind": "dismiss", "pushId": "push_1", "chatId": chat_id, "workspaceId": "ws"}
    return web_push_payload(
        Notification(silent=True, collapse_key=f"chat-{chat_id}", data=data)
    ).decode()


class Pushed:
    """A page of the app with its service worker registered and active, counting the
    notifications it has shown; pushes are delivered through the DevTools protocol."""

    def __init__(
        self, origin: str, page: Page, cdp: CDPSession, registration: str, worker: Worker
    ) -> None:
        self.origin = origin
        self.page = page
        self.cdp = cdp
        self.registration = registration
        self.worker = worker
        self.pushed_shows = 0

    def deliver(self, data: str) -> None:
        self.cdp.send(
            "ServiceWorker.deliverPushMessage",
            {"origin": self.origin, "registrationId": self.registration, "data": data},
        )

    def show(self, data: str) -> list[dict[str, str]]:
        """Deliver an alert; the notifications shown once the worker has shown it."""
        self.deliver(data)
        self.pushed_shows += 1
        deadline = time.monotonic() + WAIT_MS / 1000
        while self.worker.evaluate("self.shownCount") < self.pushed_shows:
            assert time.monotonic() < deadline, "the worker never showed the alert"
        result: list[dict[str, str]] = self.page.evaluate(SHOWN)
        return result

    def shown_after(self, count: int) -> list[dict[str, str]]:
        """The notifications shown, once there are ``count`` of them."""
        self.page.wait_for_function(
            f"async () => (await (await navigator.serviceWorker.ready).getNotifications())"
            f".length === {count}"
        )
        result: list[dict[str, str]] = self.page.evaluate(SHOWN)
        return result


def worker(context: BrowserContext, server: ServerThread) -> Pushed:
    """A page of the app with the service worker registered, active and counting its
    notifications."""
    context.grant_permissions(["notifications"], origin=server.url)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(server.url + "/")
    cdp = context.new_cdp_session(page)
    registrations: list[dict[str, Any]] = []
    cdp.on(
        "ServiceWorker.workerRegistrationUpdated",
        lambda event: registrations.extend(event["registrations"]),
    )
    cdp.send("ServiceWorker.enable")
    scope = page.evaluate(REGISTER)
    assert scope == server.url + "/"
    deadline = time.monotonic() + WAIT_MS / 1000
    while not (ids := {r["registrationId"] for r in registrations if r["scopeURL"] == scope}):
        assert time.monotonic() < deadline, registrations
        page.evaluate("0")  # a round trip: Playwright dispatches the DevTools events meanwhile
    assert len(ids) == 1, registrations
    (service_worker,) = [w for w in context.service_workers if w.url == server.url + "/sw.js"]
    service_worker.evaluate(COUNT_SHOWN)
    return Pushed(server.url, page, cdp, ids.pop(), service_worker)


def test_a_push_shows_one_notification_and_a_dismiss_closes_it(
    context: BrowserContext, server: ServerThread
) -> None:
    pushed = worker(context, server)
    first = {"tag": "chat-c1", "title": "Done", "body": "list the files"}
    assert pushed.show(alert("c1", "Done", "list the files")) == [first]

    failed = {"tag": "chat-c1", "title": "Failed", "body": "list the files"}
    assert pushed.show(alert("c1", "Failed", "list the files")) == [failed]

    other = {"tag": "chat-c2", "title": "Done", "body": "another chat"}
    assert sorted(pushed.show(alert("c2", "Done", "another chat")), key=str) == [failed, other]
    pushed.deliver(dismiss("c1"))
    assert pushed.shown_after(1) == [other]


def test_the_notify_toggle_shows_when_web_push_is_configured(
    context: BrowserContext, server: ServerThread, tmp_path: Path
) -> None:
    page = signed_in(context, server)
    assert page.is_hidden("#notify")  # no VAPID key: no toggle
    key_file = tmp_path / "vapid.pem"
    key_file.write_bytes(VapidKey.generate().private_pem())
    settings = PushSettings(vapid_key_file=key_file)
    with ServerThread(tmp_path / "push-data", agent=web_plans(), push=settings) as pushing:
        page = signed_in(context, pushing)
        page.wait_for_selector("#notify:not([hidden])")
        assert page.text_content("#notify") == "Notify me"
        assert page.get_attribute("#notify", "aria-pressed") == "false"
