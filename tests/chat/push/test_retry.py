"""The push senders' retries: which answers are retried, ``Retry-After`` in both its
forms, transport errors against a port nobody listens on, a request a server took and
never answered (not sent again), and the policy's bounds."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import partial

import httpx
import pytest
import trio

from sandstream.server.chat.push.errors import PushInDoubtError, PushUnavailableError
from sandstream.server.chat.push.retry import (
    RetryPolicy,
    is_retryable,
    retry_after,
    send_with_retries,
)
from tests.chat.push.conftest import QUICK

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        (format_datetime(datetime.fromtimestamp(NOW + 90, UTC), usegmt=True), 90.0),
        (format_datetime(datetime.fromtimestamp(NOW - 90, UTC), usegmt=True), 0.0),
        ("Wed, 21 Oct 2015 07:28:00", None),  # no zone: not an HTTP date
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        ("\u00b2", None),  # "²": a digit to str.isdigit, not to HTTP
    ],
)
def test_retry_after_reads_seconds_and_http_dates(value: str, seconds: float | None) -> None:
    response = httpx.Response(429, headers=[(b"Retry-After", value.encode("latin-1"))])
    assert retry_after(response, NOW) == seconds


def test_429_and_5xx_are_retried_and_nothing_else() -> None:
    assert [s for s in range(100, 600) if is_retryable(s)] == [429, *range(500, 600)]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that is bound and not listening: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


async def test_transport_errors_are_retried_until_the_attempts_run_out(closed_port: int) -> None:
    calls = 0
    async with httpx.AsyncClient() as client:

        async def send_once() -> httpx.Response:
            nonlocal calls
            calls += 1
            return await client.post(f"http://127.0.0.1:{closed_port}/push/x", content=b"x")

        with pytest.raises(PushUnavailableError, match="could not be reached") as caught:
            await send_with_retries(send_once, QUICK)
    assert (caught.value.status, caught.value.attempts, calls) == (None, QUICK.attempts, 3)


async def silent_server(nursery: trio.Nursery) -> tuple[int, list[bytes]]:
    """A loopback server that reads every request and never answers; its port, and
    what it read."""
    read: list[bytes] = []

    async def take(stream: trio.SocketStream) -> None:
        async for data in stream:
            read.append(bytes(data))

    listeners = await nursery.start(partial(trio.serve_tcp, take, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1], read


@pytest.mark.parametrize(
    ("timeout", "total", "why"),
    [(0.2, 30.0, "answer was lost \\(ReadTimeout"), (30.0, 0.3, "did not answer in time")],
)
async def test_a_request_that_got_no_answer_is_not_sent_again(
    nursery: trio.Nursery, timeout: float, total: float, why: str
) -> None:
    port, read = await silent_server(nursery)
    policy = RetryPolicy(attempts=3, first_delay=0.01, max_delay=0.02, total=total)
    calls = 0
    async with httpx.AsyncClient(timeout=timeout) as client:

        async def send_once() -> httpx.Response:
            nonlocal calls
            calls += 1
            return await client.post(f"http://127.0.0.1:{port}/push/x", content=b"x")

        with pytest.raises(PushInDoubtError, match=why):
            await send_with_retries(send_once, policy)
    assert calls == 1
    assert b"POST /push/x" in b"".join(read)


async def test_a_final_answer_is_returned_as_it_is() -> None:
    async def send_once() -> httpx.Response:
        return httpx.Response(410, text="gone")

    response = await send_with_retries(send_once, QUICK)
    assert (response.status_code, response.text) == (410, "gone")


def test_the_backoff_doubles_up_to_its_ceiling_with_jitter_below_it() -> None:
    policy = RetryPolicy(first_delay=1.0, max_delay=5.0)
    for retry, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (10, 5.0)]:
        waits = [policy.backoff(retry) for _ in range(50)]
        assert all(ceiling / 2 <= wait <= ceiling for wait in waits)


@pytest.mark.parametrize(
    "options",
    [
        {"attempts": 0},
        {"first_delay": -1.0},
        {"first_delay": 2.0, "max_delay": 1.0},
        {"total": 0.0},
    ],
)
def test_a_policy_with_impossible_bounds_is_refused(options: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="retry policy"):
        RetryPolicy(**options)  # type: ignore[arg-type]
