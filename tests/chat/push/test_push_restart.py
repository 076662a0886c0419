"""A restart during the push delay: a real ``sandstream serve`` is killed (SIGKILL)
while a turn's alert waits out its delay, a new one starts on the same data dir, and
every device is pushed once."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from sandstream.server.chat.push.webpush import VapidKey
from tests.chat.databases import open_store
from tests.chat.harness import start_serve_process
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
    flags = ("--vapid-key-file", str(key_file), "--push-delay", DELAY)
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
