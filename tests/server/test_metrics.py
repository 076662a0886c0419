"""``GET /metrics`` of a real runner with sessions on Hypercorn: refused without the
runner token, served with it, parsed by prometheus-client's own parser, and moved by
exactly what a real turn and a real session did."""

from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path

import httpx
import msgspec
import pytest
import trio
import trio_websocket
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.support.workspace import WorkspaceServer
from tests.server.harness import TOKEN, load, parse_stream, scripted, shell
from tests.sessions.harness import create, read_all, start_sessions, wait_state

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

NAMES = {
    "sandstream_turns_live",
    "sandstream_turns_started",
    "sandstream_turns_ended",
    "sandstream_containers_live",
    "sandstream_containers_started",
    "sandstream_sessions_live",
    "sandstream_session_readers_live",
    "sandstream_session_chunks_appended",
    "sandstream_session_bytes_appended",
    "sandstream_http_request_duration_seconds",
}


async def scrape(client: httpx.AsyncClient) -> Samples:
    """``GET /metrics``, parsed: every sample by name and labels."""
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples: Samples = {}
    names = set()
    for family in text_string_to_metric_families(response.text):
        names.add(family.name)
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    assert names >= NAMES, NAMES - names
    return samples


def _installed() -> str:
    return importlib.metadata.version("sandstream")


def _python() -> str:
    return platform.python_version()


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The samples whose value changed, by how much (histograms by their counts alone)."""
    keys = set(before) | set(after)
    return {
        key: after.get(key, 0.0) - before.get(key, 0.0)
        for key in keys
        if after.get(key, 0.0) != before.get(key, 0.0)
        and key[0].startswith("sandstream_")
        and not key[0].startswith("sandstream_http_")
        and not key[0].endswith(("_bucket", "_sum", "_created"))
    }


async def test_metrics_need_the_runner_token(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_sessions(nursery, tmp_path)
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        async with server.client(auth=False) as client:
            response = await client.get("/metrics", headers=headers)
        assert response.status_code == 401
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["status"] == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    async with server.client() as client:
        samples = await scrape(client)
    assert value(samples, "sandstream_turns_started_total") == 0
    assert value(samples, "sandstream_turns_ended_total", outcome="result") == 0


async def test_a_turn_moves_the_counters_by_what_happened(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(40)
    async with server.client() as client:
        before = await scrape(client)
        async with client.stream("POST", "/stream", json=workspace.mint_dispatch()) as response:
            assert response.status_code == 200
            lines = parse_stream(await response.aread())
        assert lines[-1]["type"] == "result"
        await server.wait_records(1)
        after = await scrape(client)
    assert moved(before, after) == {
        ("sandstream_turns_started_total", frozenset()): 1,
        ("sandstream_turns_ended_total", frozenset({("outcome", "result")})): 1,
        ("sandstream_containers_started_total", frozenset()): 1,
        ("sandstream_turn_duration_seconds_count", frozenset({("outcome", "result")})): 1,
        ("sandstream_turn_first_line_seconds_count", frozenset()): 1,
    }
    duration = value(after, "sandstream_turn_duration_seconds_sum", outcome="result")
    first_line = value(after, "sandstream_turn_first_line_seconds_sum")
    assert 0 < first_line <= duration
    assert value(after, "process_cpu_seconds_total") > 0  # the process's own metrics
    assert value(after, "sandstream_build_info", version=_installed(), python=_python()) == 1
    requests = "sandstream_http_request_duration_seconds_count"
    counted = value(after, requests, route="/stream", status="2xx")
    assert counted == value(before, requests, route="/stream", status="2xx") + 1
    assert value(after, "sandstream_turns_live") == 0
    assert value(after, "sandstream_containers_live") == 0


async def test_a_session_counts_its_chunks_bytes_and_readers(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = load(120, payload_bytes=32)
    async with server.client() as client:
        before = await scrape(client)
        session_id = await create(client, workspace.mint_dispatch("go"))
        whole = await read_all(server, session_id)
        await wait_state(client, session_id, "completed")
        await server.wait_records(1)
        after = await scrape(client)
    assert moved(before, after) == {
        ("sandstream_turns_started_total", frozenset()): 1,
        ("sandstream_turns_ended_total", frozenset({("outcome", "result")})): 1,
        ("sandstream_containers_started_total", frozenset()): 1,
        ("sandstream_session_chunks_appended_total", frozenset()): len(whole.chunks),
        ("sandstream_session_bytes_appended_total", frozenset()): sum(map(len, whole.chunks)),
        ("sandstream_turn_duration_seconds_count", frozenset({("outcome", "result")})): 1,
        ("sandstream_turn_first_line_seconds_count", frozenset()): 1,
    }
    requests = "sandstream_http_request_duration_seconds_count"
    assert value(after, requests, route="/sessions/{session_id}/stream", status="2xx") == 1
    assert value(after, requests, route="/sessions", status="2xx") == 1
    assert not any("ses_" in dict(labels).get("route", "") for _, labels in after)


async def test_live_readers_are_counted_by_transport(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = scripted(shell("sleep 300"))
    async with server.client() as client:
        session_id = await create(client, workspace.mint_dispatch("go"))
        headers = {"Accept": "text/event-stream"}
        async with client.stream("GET", f"/sessions/{session_id}/stream", headers=headers) as sse:
            assert sse.status_code == 200
            body = sse.aiter_raw()  # one iterator, kept: a dropped one closes the response
            seen = b""
            while b"sleep 300" not in seen:  # the step runs: the reader is caught up, live
                seen += await anext(body)
            samples = await scrape(client)
            readers = value(samples, "sandstream_session_readers_live", transport="sse")
            assert readers == 1, seen
            assert value(samples, "sandstream_session_readers_live", transport="ndjson") == 0
            assert value(samples, "sandstream_sessions_live") == 1
        ws_url = server.url.replace("http://", "ws://") + f"/sessions/{session_id}/ws"
        auth = [(b"Authorization", f"Bearer {TOKEN}".encode())]
        async with trio_websocket.open_websocket_url(ws_url, extra_headers=auth) as ws:
            await ws.get_message()  # the first chunk: the reader is being served
            samples = await scrape(client)
            assert value(samples, "sandstream_session_readers_live", transport="websocket") == 1
        await wait_readers_gone(client)
        response = await client.post(f"/sessions/{session_id}/interrupt")
        assert response.status_code == 200
        samples = await scrape(client)
    assert value(samples, "sandstream_sessions_live") == 0
    assert value(samples, "sandstream_turns_ended_total", outcome="interrupted") == 1


async def wait_readers_gone(client: httpx.AsyncClient) -> None:
    """Poll until no reader is counted (the server sees the disconnects a little later)."""
    with trio.fail_after(30):
        while True:
            samples = await scrape(client)
            if not any(
                value(samples, "sandstream_session_readers_live", transport=transport)
                for transport in ("sse", "ndjson", "websocket")
            ):
                return
            await trio.sleep(0.02)


async def test_a_turn_with_text_times_its_first_text(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    workspace.config = scripted(message="one two three", delta_delay_sec=0.05)
    dispatch = {**workspace.mint_dispatch(), "extensions": ["live"]}
    async with server.client() as client:
        before = await scrape(client)
        async with client.stream("POST", "/stream", json=dispatch) as response:
            body = await response.aread()
        types = [msgspec.json.decode(line)["type"] for line in body.splitlines()]
        assert types.count("delta") >= 3 and types[-1] == "result"
        [record] = await server.wait_records(1)
        after = await scrape(client)
    first_text = "sandstream_turn_first_text_seconds"
    assert value(after, f"{first_text}_count") == value(before, f"{first_text}_count") + 1
    assert record.first_line_ms is not None and record.first_text_ms is not None
    assert record.first_line_ms <= record.first_text_ms <= record.duration_ms
    assert value(after, f"{first_text}_sum") == pytest.approx(record.first_text_ms / 1000)
