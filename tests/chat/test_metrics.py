"""``GET /metrics`` of the chat backend (embedded runner, sessions, log mover): the chat
API token or the runner token, parsed by prometheus-client's own parser, moved by a real
turn; and ``sandstream serve`` as a process: JSON lines on stderr, ``--metrics-bind``."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import msgspec
import trio
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.support.servers import http1_client
from tests.chat.harness import (
    API_TOKEN,
    DEADLINE,
    RUNNER_TOKEN,
    ChatServer,
    start_chat_server,
    start_serve_process,
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(url: str, token: str | None) -> Samples:
    headers = None if token is None else {"Authorization": f"Bearer {token}"}
    async with http1_client(url, headers=headers, timeout=DEADLINE) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    return parse(response.text)


async def test_metrics_take_the_api_token_or_the_runner_token(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    async with server.client(auth=False) as client:
        refused = await client.get("/metrics")
    assert refused.status_code == 401
    assert refused.headers["content-type"] == "application/problem+json"
    for token in (API_TOKEN, RUNNER_TOKEN):
        samples = await scrape(server.url, token)
        assert samples[("sandstream_mover_lag_chunks", ())] == 0
        assert samples[("sandstream_mover_lease_claims_total", (("result", "acquired"),))] == 0
        assert samples[("sandstream_turns_live", ())] == 0


async def test_a_chat_turn_moves_the_counters(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_chat_server(nursery, tmp_path)
    run = await server.turn("hello")
    assert run.status == 200 and run.kinds[-1] == "done", run.kinds
    samples = await settled_scrape(server)
    assert samples[("sandstream_turns_started_total", ())] == 1
    assert samples[("sandstream_turns_ended_total", (("outcome", "result"),))] == 1
    assert samples[("sandstream_containers_started_total", ())] == 1
    assert samples[("sandstream_sessions_live", ())] == 0
    assert samples[("sandstream_session_chunks_appended_total", ())] > 0
    assert samples[("sandstream_mover_lease_claims_total", (("result", "acquired"),))] >= 1
    assert samples[("sandstream_mover_lease_claims_total", (("result", "failed"),))] == 0
    assert samples[("sandstream_mover_lease_renew_failures_total", ())] == 0
    assert samples[("sandstream_mover_lag_chunks", ())] == 0
    route = (("route", "/api/assistant/chat/stream"), ("status", "2xx"))
    assert samples[("sandstream_http_request_duration_seconds_count", route)] == 1
    settled = (("code", ""), ("status", "complete"))
    assert samples[("sandstream_chat_turns_settled_total", settled)] == 1
    assert samples[("sandstream_chat_turn_duration_seconds_count", ())] == 1
    assert 0 < samples[("sandstream_chat_turn_duration_seconds_sum", ())] < DEADLINE
    for op in ("read", "write"):  # the chat database's calls, timed
        labels = (("op", op), ("store", "sqlite"))
        assert samples[("sandstream_store_operation_seconds_count", labels)] > 0
        assert samples[("sandstream_store_operation_errors_total", labels)] == 0


async def settled_scrape(server: ChatServer) -> Samples:
    """Scrape once the turn's session ended and the mover let it go."""
    with trio.fail_after(DEADLINE):
        while True:
            samples = await scrape(server.url, API_TOKEN)
            if not samples[("sandstream_turns_live", ())] and not server.service.turns.mover.moving:
                return samples
            await trio.sleep(0.02)


async def test_serve_logs_json_lines_and_serves_metrics_on_their_own_port(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    quick = {"agent": {"kind": "scripted", "message": "quick"}}
    served = await start_serve_process(
        nursery, data_dir, quick, "--metrics-bind", f"127.0.0.1:{port}"
    )
    token = (data_dir / "api-token").read_text().strip()
    async with served.client(token) as client:
        refused = await client.get("/metrics")
    assert refused.status_code == 404
    with trio.fail_after(DEADLINE):
        while True:
            try:
                samples = await scrape(f"http://127.0.0.1:{port}", None)
                break
            except httpx.ConnectError:  # the metrics listener starts after the main one
                await trio.sleep(0.02)
    assert samples[("sandstream_turns_started_total", ())] == 0
    served.process.terminate()
    with trio.fail_after(DEADLINE):
        await served.exited.wait()
    assert served.process.returncode == 0, served.stderr
    logged = [msgspec.json.decode(line) for line in served.stderr if line]
    assert logged
    for record in logged:
        assert {"ts", "level", "logger", "message"} <= record.keys(), record
