"""What a turn's model gateway adds to a model call, against the provider called direct,
side by side in one run.

``.venv/bin/python -m benchmarks.gateway.run [--trials 300] [--stream 256M] [--repeat 5]
[--json]``

Three processes, as in a turn: a provider (a raw HTTP/1.1 server on loopback answering
``POST /v1/chat/completions?size=N`` with ``N`` bytes of SSE in 64 KiB writes, framed by
``Content-Length``), the gateway (:mod:`.gateway_process`, as the runner holds it) and
the client (this process, httpx on one kept-alive connection, as an agent's SDK). Each
measure alternates direct and through the gateway trial by trial:

- **first byte**: request sent → the first byte of the answer's body (a 2 KiB answer);
- **throughput**: bytes/s of a long answer (``--stream``), request sent → last byte.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import httpx
import trio

from benchmarks.support.report import progress
from sandstream.server.runner.limits import parse_size

from ..runner.support import environment, summary

KEY: Final = "sk-benchmark-provider-key"
PROVIDER: Final = r"""
import socket, sys, threading
chunk = (b"data: " + b"x" * 1000 + b"\n\n") * 64
def serve(conn):
    with conn:
        pending = b""
        while True:
            while b"\r\n\r\n" not in pending:
                data = conn.recv(65536)
                if not data:
                    return
                pending += data
            head, _, pending = pending.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(pending) < length:
                pending += conn.recv(65536)
            pending = pending[length:]
            target = head.split(b" ")[1]
            size = int(target.split(b"size=")[1].split(b"&")[0])
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"content-length: %d\r\n\r\n" % size)
            left = size
            while left:
                piece = chunk[: min(left, len(chunk))]
                conn.sendall(piece)
                left -= len(piece)
listener = socket.create_server(("127.0.0.1", 0))
print(f"http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
while True:
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
SMALL: Final = 2048


@contextmanager
def _process(argv: list[str]) -> Iterator[str]:
    """Start ``argv``; its first stdout line; killed on the way out."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


async def _call(client: httpx.AsyncClient, size: int) -> tuple[float, float, int]:
    """One call: seconds to the first body byte, to the last, and the bytes."""
    started = time.perf_counter()
    first = 0.0
    got = 0
    async with client.stream("POST", f"/chat/completions?size={size}", json={"stream": True}) as r:
        assert r.status_code == 200, await r.aread()
        async for chunk in r.aiter_raw():
            if not got:
                first = time.perf_counter() - started
            got += len(chunk)
    assert got == size, (got, size)
    return first, time.perf_counter() - started, got


async def measure(
    provider: str, gateway: dict[str, str], trials: int, stream: int, repeat: int
) -> dict[str, Any]:
    direct = httpx.AsyncClient(
        base_url=f"{provider}/v1", headers={"authorization": f"Bearer {KEY}"}
    )
    through = httpx.AsyncClient(
        base_url=f"{gateway['url']}/openai",
        headers={"authorization": f"Bearer {gateway['credential']}"},
    )
    paths = {"direct": direct, "gateway": through}
    firsts: dict[str, list[float]] = {name: [] for name in paths}
    rates: dict[str, list[float]] = {name: [] for name in paths}
    async with direct, through:
        for client in paths.values():  # warm: connections open, code paths hot
            for _ in range(20):
                await _call(client, SMALL)
        progress(f"first byte: {trials} trials each way")
        for _ in range(trials):
            for name, client in paths.items():
                firsts[name].append((await _call(client, SMALL))[0] * 1000)
        progress(f"throughput: {repeat} answers of {stream:,} bytes each way")
        for _ in range(repeat):
            for name, client in paths.items():
                _, seconds, got = await _call(client, stream)
                rates[name].append(got / seconds / 1e6)
    result: dict[str, Any] = {"environment": environment()}
    for name in paths:
        result[name] = {
            "first_byte_ms": summary(firsts[name]),
            "throughput_mb_s": sorted(rates[name])[len(rates[name]) // 2],
        }
    added = result["gateway"]["first_byte_ms"]["p50"] - result["direct"]["first_byte_ms"]["p50"]
    ratio = result["gateway"]["throughput_mb_s"] / result["direct"]["throughput_mb_s"]
    result["added_first_byte_ms_p50"] = added
    result["added_first_byte_ms_p95"] = (
        result["gateway"]["first_byte_ms"]["p95"] - result["direct"]["first_byte_ms"]["p95"]
    )
    result["throughput_ratio"] = ratio
    result["goals"] = {
        "added_first_byte_ms_p50 <= 1": added <= 1.0,
        "throughput_ratio >= 0.9": ratio >= 0.9,
    }
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=".venv/bin/python -m benchmarks.gateway.run")
    parser.add_argument("--trials", type=int, default=300, help="first-byte trials each way")
    parser.add_argument("--stream", type=parse_size, default=parse_size("256M"), help="long answer")
    parser.add_argument("--repeat", type=int, default=5, help="long answers each way (median)")
    parser.add_argument("--json", action="store_true", help="print the JSON only")
    args = parser.parse_args(argv)
    with _process([sys.executable, "-c", PROVIDER]) as provider:
        gateway_argv = [sys.executable, "-m", "benchmarks.gateway.gateway_process"]
        with _process([*gateway_argv, f"{provider}/v1", KEY]) as line:
            gateway = json.loads(line)
            result = trio.run(measure, provider, gateway, args.trials, args.stream, args.repeat)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name in ("direct", "gateway"):
        first = result[name]["first_byte_ms"]
        print(
            f"{name}: first byte p50 {first['p50']:.3f} ms, p95 {first['p95']:.3f} ms; "
            f"throughput {result[name]['throughput_mb_s']:,.0f} MB/s"
        )
    print(
        f"gateway adds {result['added_first_byte_ms_p50']:.3f} ms to the first byte at p50 "
        f"(goal <= 1 ms), {result['added_first_byte_ms_p95']:.3f} ms at p95; "
        f"throughput {result['throughput_ratio']:.2f} of direct (goal >= 0.9)"
    )
    print(json.dumps(result["environment"]))


if __name__ == "__main__":
    main()
