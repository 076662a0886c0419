"""Restarts of a real ``sandstream serve`` (killed with SIGKILL, a new one started on
the same data dir): killed while a turn's alert waits out its delay, every device is
pushed once after the restart; killed after a push service took the alert for one
device and before its answer came, that device is not pushed again (it may have had
it) and the others are pushed once: sent or dropped, never twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from sandstream.server.chat.push.webpush import VapidKey
from tests.chat.databases import open_store
from tests.chat.harness import WORKSPACE, start_serve_process
from tests.chat.push.devices import pushes_ended, subscribe, unwatched_turn
from tests.support.push_services import LoopbackPushService

pytestmark = pytest.mark.usefixtures("chat_database")

QUICK = {"agent": {"kind": "scripted", "steps": [], "message": "done"}}
DELAY = "6"
"""Seconds of push delay: long enough to kill the first server inside it."""


async def test_a_restart_during_the_delay_sends_once(
    nursery: trio.Nursery, tmp_path: Path, push_service: LoopbackPushService
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    key_file = tmp_path / "vapid.pem"
    key_file.write_bytes(VapidKey.generate().private_pem())
    flags: tuple[str, ...] = ("--vapid-key-file", str(key_file), "--push-delay", DELAY)
    flags += ("--push-allow-host", push_service.host)
    first = await start_serve_process(nursery, data_dir, QUICK, *flags)
    token = (data_dir / "api-token").read_text().strip()
    async with first.client(token) as api:
        phone, _ = await subscribe(api, push_service)
        laptop, _ = await subscribe(api, push_service)
        await unwatched_turn(api, "work")
    first.process.kill()
    with trio.fail_after(10):
        await first.exited.wait()
    assert push_service.deliveries == []  # killed inside the delay: nothing went out

    second = await start_serve_process(nursery, data_dir, QUICK, *flags)
    store = await open_store(data_dir)
    try:
        assert await pushes_ended(store, 1) == [("alert", "sent")]
    finally:
        await store.close()
    assert len(push_service.delivered_to(phone)) == 1
    assert len(push_service.delivered_to(laptop)) == 1
    second.process.terminate()
    with trio.fail_after(30):
        await second.exited.wait()


async def test_a_server_killed_before_a_push_services_answer_never_sends_twice(
    nursery: trio.Nursery, tmp_path: Path, push_service: LoopbackPushService
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    key_file = tmp_path / "vapid.pem"
    key_file.write_bytes(VapidKey.generate().private_pem())
    flags: tuple[str, ...] = ("--vapid-key-file", str(key_file), "--push-delay", "0.5")
    flags += ("--push-claim-lease", "2")  # the successor takes the push over 2 s after
    flags += ("--push-allow-host", push_service.host, "--push-workspace-sends", "1")
    first = await start_serve_process(nursery, data_dir, QUICK, *flags)
    token = (data_dir / "api-token").read_text().strip()
    async with first.client(token) as api:
        by_id = {i: b for b, i in [await subscribe(api, push_service) for _ in range(2)]}
        listed = await api.get(
            "/api/assistant/push/subscriptions", params={"workspaceId": WORKSPACE}
        )
        # the devices are pushed in this order: the first has the push, its answer never comes
        first_id, second_id = [s["id"] for s in listed.json()["subscriptions"]]
        delivered = push_service.hold(by_id[first_id])
        await unwatched_turn(api, "work")
        with trio.fail_after(30):
            await delivered.wait()
    first.process.kill()
    with trio.fail_after(10):
        await first.exited.wait()
    assert push_service.attempts[by_id[second_id].subscription.endpoint] == 0

    second = await start_serve_process(nursery, data_dir, QUICK, *flags)
    store = await open_store(data_dir)
    try:
        assert await pushes_ended(store, 1) == [("alert", "sent")]
        states = await store.db.read(
            lambda conn: dict(
                conn.execute("SELECT subscription_id, state FROM push_deliveries").fetchall()
            )
        )
    finally:
        await store.close()
    assert states == {first_id: "unknown", second_id: "sent"}
    for browser in by_id.values():
        assert len(push_service.delivered_to(browser)) == 1
        assert push_service.attempts[browser.subscription.endpoint] == 1
    second.process.terminate()
    with trio.fail_after(30):
        await second.exited.wait()
