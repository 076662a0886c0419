"""What ``--sandbox-network isolated`` costs against ``host``, side by side in one run.

``.venv/bin/python -m benchmarks.network.run [--trials 50] [--lines 200000]
[--download 256M] [--repeat 5] [--json]``

Two runners in this process (Hypercorn on loopback), each with a bwrap launcher of
its own, one ``isolated`` (a pasta per turn), one ``host``; every measure alternates
between them trial by trial, so both see the same machine:

- **start**: request sent → first NDJSON line received, the real container (Python
  start-up, ``/env`` and ``/config`` redeemed through the network, its first line);
  under ``isolated`` this includes starting and configuring pasta; **start, shell**:
  the same with a container that prints one line at once (the launcher's own cost);
- **lines/s**: a load-mode container's unpaced lines (64-byte payload) through the
  runner to an httpx client (they leave the sandbox on its stdout, not its network);
- **download**: bytes/s a sandboxed ``python3`` reads from an HTTP server on the host's
  loopback (a process of its own, allowed to the isolated sandbox with
  ``--sandbox-allow``), timed inside the sandbox: first byte → last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from benchmarks.support.report import progress
from benchmarks.support.server_process import ServerProcess
from benchmarks.support.workspace import WorkspaceServer, start_workspace
from sandstream.core.schemas import ConfigResponse, LoadSpec, ScriptedAgent
from sandstream.server import BwrapLauncher, RunnerSettings
from sandstream.server.runner.launcher import DEFAULT_CONTAINER_ARGV
from sandstream.server.runner.limits import parse_size
from sandstream.server.runner.network import Endpoint, NetworkMode

from ..runner.support import TOKEN, InProcessRunner, environment, start_in_process, summary

MODES: Final[tuple[NetworkMode, ...]] = ("isolated", "host")
SHELL_CONTAINER: Final = ("sh", "-c", 'cat >/dev/null; echo \'{"type":"result","message":"hi"}\'')
AUTH: Final = {"Authorization": f"Bearer {TOKEN}"}

SERVER: Final = r"""
import socket, sys
size, chunk = int(sys.argv[1]), b"\0" * (1 << 20)
listener = socket.create_server(("127.0.0.1", 0))
print(f"listening on http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
while True:
    conn, _ = listener.accept()
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            data = conn.recv(4096)
            if not data:
                break
            request += data
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        left = size
        while left > 0:
            left -= conn.send(chunk[: min(left, len(chunk))])
"""
"""The download server: ``Content-Length`` bytes of zeros for any request."""

CLIENT: Final = r"""
import json, socket, sys, time
sys.stdin.read()
port = int(sys.argv[1])
buffer = bytearray(1 << 20)
with socket.create_connection(("127.0.0.1", port)) as sock:
    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    received, first = 0, 0.0
    while n := sock.recv_into(buffer):
        if not first:
            first = time.perf_counter()
        received += n
    elapsed = time.perf_counter() - first
print(json.dumps({"type": "result", "message": json.dumps([received, elapsed])}))
"""
"""The download client, as the container: reads the dispatch, downloads, reports
``[bytes, seconds]`` (headers included, first byte → EOF) in its ``result``."""


async def _download_server(nursery: trio.Nursery, size: int) -> int:
    """The download server in a process of its own, killed with ``nursery``; its port."""
    server = await ServerProcess.start(
        nursery,
        [sys.executable, "-c", SERVER, str(size)],
        listening=re.compile(r"listening on (http://\S+)"),
        capture="both",
        stop_signal=signal.SIGKILL,
    )
    return int(server.url.rsplit(":", 1)[1])


async def _runners(
    nursery: trio.Nursery, argv: list[str], allowed: list[Endpoint]
) -> dict[str, InProcessRunner]:
    settings = RunnerSettings(token=TOKEN, max_live=4)
    return {
        mode: await start_in_process(
            nursery,
            settings,
            BwrapLauncher(argv=argv, network=mode, allowed=allowed, stderr="discard"),
        )
        for mode in MODES
    }


async def _first_line(url: str, workspace: WorkspaceServer) -> float:
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60) as client:
        started = time.perf_counter()
        async with client.stream("POST", "/stream", json=workspace.mint_dispatch()) as response:
            async for _ in response.aiter_raw():
                return (time.perf_counter() - started) * 1000
    raise RuntimeError("the stream ended without a line")


async def _lines_per_s(url: str, workspace: WorkspaceServer) -> float:
    lines, first = 0, 0.0
    async with (
        httpx.AsyncClient(base_url=url, headers=AUTH, timeout=300) as client,
        client.stream("POST", "/stream", json=workspace.mint_dispatch()) as response,
    ):
        async for chunk in response.aiter_raw():
            if not first:
                first = time.perf_counter()
            lines += chunk.count(b"\n")
    return lines / (time.perf_counter() - first)


async def _download(url: str, workspace: WorkspaceServer, size: int) -> float:
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=300) as client:
        response = await client.post("/stream", json=workspace.mint_dispatch())
    last = json.loads(response.text.splitlines()[-1])
    if last.get("type") != "result":
        raise RuntimeError(f"the download failed: {last}")
    received, seconds = json.loads(last["message"])
    if received < size:
        raise RuntimeError(f"the download ended early: {received} of {size} bytes")
    return float(received / seconds)


async def _measure(args: argparse.Namespace, script_dir: Path) -> dict[str, Any]:
    start: dict[str, list[float]] = {mode: [] for mode in MODES}
    start_shell: dict[str, list[float]] = {mode: [] for mode in MODES}
    lines: dict[str, list[float]] = {mode: [] for mode in MODES}
    download: dict[str, list[float]] = {mode: [] for mode in MODES}
    client = script_dir / "download.py"
    client.write_text(CLIENT)
    async with trio.open_nursery() as nursery:
        port = await _download_server(nursery, args.download)
        workspace = await start_workspace(
            nursery, config=ConfigResponse(agent=ScriptedAgent(message="hi"))
        )
        allowed = [Endpoint("127.0.0.1", port)]
        real = await _runners(nursery, list(DEFAULT_CONTAINER_ARGV), allowed)
        shell = await _runners(nursery, list(SHELL_CONTAINER), allowed)
        downloader = await _runners(nursery, [sys.executable, str(client), str(port)], allowed)
        progress(f"start: {args.warmup} + {args.trials} turns per mode")
        for index in range(args.warmup + args.trials):
            for mode in MODES if index % 2 == 0 else MODES[::-1]:
                elapsed = await _first_line(real[mode].url, workspace)
                elapsed_shell = await _first_line(shell[mode].url, workspace)
                if index >= args.warmup:
                    start[mode].append(elapsed)
                    start_shell[mode].append(elapsed_shell)
        workspace.config = ConfigResponse(
            agent=ScriptedAgent(load=LoadSpec(lines=args.lines), message="loaded")
        )
        progress(f"lines/s: {args.repeat} runs of {args.lines:,} lines per mode")
        for index in range(args.repeat):
            for mode in MODES if index % 2 == 0 else MODES[::-1]:
                lines[mode].append(await _lines_per_s(real[mode].url, workspace))
        progress(f"download: {args.repeat} downloads of {args.download:,} bytes per mode")
        for index in range(args.repeat):
            for mode in MODES if index % 2 == 0 else MODES[::-1]:
                download[mode].append(
                    await _download(downloader[mode].url, workspace, args.download)
                )
        for server in (*real.values(), *shell.values(), *downloader.values()):
            server.stop.set()
        nursery.cancel_scope.cancel()
    return {
        mode: {
            "start_ms": summary(start[mode]),
            "start_shell_ms": summary(start_shell[mode]),
            "lines_per_s": summary(lines[mode]),
            "download_bytes_per_s": summary(download[mode]),
        }
        for mode in MODES
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50, help="turns per mode, for start")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lines", type=int, default=200_000, help="lines per lines/s run")
    parser.add_argument("--download", type=parse_size, default=256 << 20, metavar="SIZE")
    parser.add_argument("--repeat", type=int, default=5, help="runs per mode, lines and bytes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    env = environment()
    with _private_dir() as script_dir:
        results = trio.run(_measure, args, script_dir)
    doc = {"environment": env, "results": results}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"sandbox network isolated vs host (bwrap); {env}")
    isolated, host = results["isolated"], results["host"]
    rows = (
        ("start (ms, p50)", "start_ms", "p50", "{:,.1f}"),
        ("start (ms, p95)", "start_ms", "p95", "{:,.1f}"),
        ("start, shell (ms, p50)", "start_shell_ms", "p50", "{:,.1f}"),
        ("start, shell (ms, p95)", "start_shell_ms", "p95", "{:,.1f}"),
        ("lines/s (median)", "lines_per_s", "p50", "{:,.0f}"),
        ("download MB/s (median)", "download_bytes_per_s", "p50", "{:,.0f}"),
    )
    for name, measure, stat, number in rows:
        scale = 1e-6 if measure == "download_bytes_per_s" else 1.0
        a, b = isolated[measure][stat] * scale, host[measure][stat] * scale
        print(
            f"  {name:<24} isolated {number.format(a):>12}  host {number.format(b):>12}"
            f"  isolated/host {a / b:.2f}"
        )
    return 0


@contextlib.contextmanager
def _private_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sandstream-network-bench-") as name:
        yield Path(name)


if __name__ == "__main__":
    sys.exit(main())
