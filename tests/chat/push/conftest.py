"""Fixtures for the push senders' tests: the loopback Web Push service, an HTTP client,
the loopback listener no push may reach."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from sandstream.server.chat.push.retry import RetryPolicy
from tests.chat.push.inner_hosts import Listener, start_listener
from tests.support.push_services import LoopbackPushService, start_push_service

QUICK = RetryPolicy(attempts=3, first_delay=0.01, max_delay=0.02, total=30.0)
"""Retries that wait hundredths of a second, for tests that count attempts."""


@pytest.fixture
async def push_service(nursery: trio.Nursery) -> LoopbackPushService:
    """A loopback Web Push service, serving until the test ends."""
    return await start_push_service(nursery)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP client the senders send with."""
    async with httpx.AsyncClient(timeout=10.0) as client:
        yield client


@pytest.fixture
async def listener(nursery: trio.Nursery) -> Listener:
    """What no push may reach: a listener on 127.0.0.1 and [::1], one port."""
    return await start_listener(nursery)
