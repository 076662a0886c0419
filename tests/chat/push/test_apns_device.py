"""An APNs device through the outbox, end to end: a real chat server (SQLite and
PostgreSQL) with APNs configured as an operator does, the device token registered over
its API, and the loopback APNs (HTTP/2 over TLS under a throwaway CA, trusted the
standard way: ``SSL_CERT_FILE``, which httpx honours). A turn nobody watched reaches
the device once, with the chat's collapse id and what its app acks with."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from benchmarks.support.redis_server import TlsFiles
from sandstream.server.chat.push.settings import PushSettings
from tests.chat.harness import WORKSPACE, plans, sleeping, start_chat_server
from tests.chat.push.devices import pushes_ended, unwatched_turn
from tests.support.apns_fcm_services import start_apns_server

pytestmark = pytest.mark.usefixtures("chat_database")

TOPIC = "dev.sandstream.app"
DEVICE = "5c0ffee5" * 8


async def test_an_apns_device_gets_the_alert_of_a_turn_nobody_watched(
    nursery: trio.Nursery, tmp_path: Path, tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    apns = await start_apns_server(nursery, tls_files, topic=TOPIC)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files.ca))  # the CA the server trusts
    key_file = tmp_path / f"AuthKey_{apns.key_id}.p8"
    key_file.write_text(apns.p8)
    settings = PushSettings(
        apns_key_file=key_file,
        apns_key_id=apns.key_id,
        apns_team_id=apns.team_id,
        apns_topic=TOPIC,
        apns_host=apns.url,
        delay=0.5,
        poll_interval=0.05,
    )
    server = await start_chat_server(
        nursery, tmp_path / "data", agent=plans(slow=sleeping(0.5)), push=settings
    )
    async with server.client() as api:
        registered = await api.post(
            "/api/assistant/push/subscriptions",
            json={"workspaceId": WORKSPACE, "apnsToken": DEVICE},
        )
        assert registered.status_code == 201, registered.text
        chat_id = await unwatched_turn(api, "slow list the files")
    assert await pushes_ended(server.store, 1) == [("alert", "sent")]
    [delivery] = apns.deliveries
    assert delivery.device_token == DEVICE
    assert delivery.headers["apns-topic"] == TOPIC
    assert delivery.headers["apns-push-type"] == "alert"
    assert delivery.headers["apns-priority"] == "10"
    assert delivery.headers["apns-collapse-id"] == f"chat-{chat_id}"
    payload = delivery.payload
    assert payload["aps"]["alert"] == {"title": "Done", "body": "slow list the files"}
    assert payload["aps"]["thread-id"] == chat_id
    assert payload["kind"] == "alert"
    assert payload["chatId"] == chat_id
    assert payload["subscriptionId"] == registered.json()["id"]
    assert payload["ackToken"]
    assert [attempt.status for attempt in apns.attempts] == [200]
