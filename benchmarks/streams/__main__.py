"""Durable Streams servers side by side: append throughput, fan-out latency, catch-up
reads, memory per subscriber.

``.venv/bin/python -m benchmarks.streams [append] [fanout] [catchup] [memory]
[--targets reference,sandstream] [--json] [options]``

Each part starts each server of ``--targets`` afresh (:mod:`.servers`: the Node
reference server ``@durable-streams/server``, file-backed, and ``sandstream runner
--data-dir``), each a process of its own on a loopback port with its own temp data
dir, and drives them alike over HTTP/1.1 from client processes of their own
(:mod:`.appender`, :mod:`.subscribers`, :mod:`.reader`: raw sockets and ``epoll``,
their CPU reported beside the server's so that one can see they were not the
limit). Every part checks what it measured: each stream read back, or each
subscriber's bytes, must be every append, in order.

- **append** (:mod:`.append`): ``--size``-byte appends to ``--streams`` streams at once,
  plain and with idempotent producer headers; appends/s and MB/s;
- **fanout** (:mod:`.fanout`): one writer at ``--rate`` appends/s, N live SSE
  subscribers (``--ladder``); latency from an append's send to each receipt, p50/p99;
- **catchup** (:mod:`.catchup`): a ``--catchup-mb`` MB stream read from ``-1`` to its end;
  MB/s;
- **memory** (:mod:`.memory`): server RSS with ``--idle`` idle SSE subscribers minus
  without, per subscriber.

Prints a Markdown table (a column per server, and sandstream ÷ reference) or, with
``--json``, everything measured; progress goes to stderr. A server that answers
against the protocol, or a client that finds a byte out of place, stops the run with
an error naming the server. Stopped (an error, ^C), the client processes are killed,
the servers stopped and the temp dir removed.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from benchmarks.runner.support import environment

from . import append, catchup, fanout, memory
from .servers import TARGETS, StreamServer, install_reference, start_server
from .table import render

PARTS = ("append", "fanout", "catchup", "memory")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=".venv/bin/python -m benchmarks.streams")
    parser.add_argument("parts", nargs="*", default=list(PARTS), help=", ".join(PARTS))
    parser.add_argument(
        "--targets",
        default="reference,sandstream",
        help=f"servers, in order, of {', '.join(TARGETS)} (reference,sandstream)",
    )
    parser.add_argument("--json", action="store_true", help="print everything as JSON")
    parser.add_argument("--repeat", type=int, default=3, help="append/catch-up rounds (3)")
    parser.add_argument("--streams", type=int, default=100, help="append: streams (100)")
    parser.add_argument("--size", type=int, default=256, help="append, fan-out: bytes (256)")
    parser.add_argument("--clients", type=int, default=2, help="append: processes (2)")
    parser.add_argument("--duration", type=float, default=10.0, help="append: window s (10)")
    parser.add_argument("--warmup", type=float, default=2.0, help="append: warm-up s (2)")
    parser.add_argument("--ladder", default="1,100,1000", help="fan-out: subscribers")
    parser.add_argument("--rate", type=float, default=20.0, help="fan-out: appends/s (20)")
    parser.add_argument("--fanout-duration", type=float, default=5.0, help="fan-out: s (5)")
    parser.add_argument("--fanout-warmup", type=float, default=1.0, help="fan-out: s (1)")
    parser.add_argument("--subscriber-procs", type=int, default=1, help="fan-out: processes")
    parser.add_argument("--catchup-mb", type=float, default=128.0, help="catch-up: MB (128)")
    parser.add_argument("--catchup-size", type=int, default=65536, help="catch-up: append B")
    parser.add_argument("--idle", type=int, default=1000, help="memory: subscribers (1000)")
    parser.add_argument("--settle", type=float, default=2.0, help="memory: s before RSS (2)")
    args = parser.parse_args(argv)
    args.targets = args.targets.split(",")
    for name in args.targets:
        if name not in TARGETS:
            parser.error(f"no target {name!r}: one of {', '.join(TARGETS)}")
    for part in args.parts:
        if part not in PARTS:
            parser.error(f"no part {part!r}: one of {', '.join(PARTS)}")
    args.parts = [part for part in PARTS if part in args.parts]
    return args


async def _with_servers(
    names: list[str],
    data_dir: Path,
    measure: Callable[[list[StreamServer]], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """``measure`` with each server of ``names`` started afresh, stopped after."""
    async with trio.open_nursery() as nursery:
        servers = [await start_server(nursery, name, data_dir / name) for name in names]
        try:
            return await measure(servers)
        finally:
            with trio.CancelScope(shield=True):
                for server in servers:
                    await server.stop()
                nursery.cancel_scope.cancel()


async def _run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"environment": environment(), "targets": args.targets}
    measures: dict[str, Callable[[list[StreamServer]], Awaitable[dict[str, Any]]]] = {
        "append": lambda servers: append.measure(
            servers,
            streams=args.streams,
            clients=args.clients,
            size=args.size,
            duration=args.duration,
            warmup=args.warmup,
            repeat=args.repeat,
        ),
        "fanout": lambda servers: fanout.measure(
            servers,
            ladder=[int(n) for n in args.ladder.split(",")],
            procs=args.subscriber_procs,
            rate=args.rate,
            duration=args.fanout_duration,
            warmup=args.fanout_warmup,
            size=args.size,
            tmp=tmp,
        ),
        "catchup": lambda servers: catchup.measure(
            servers, mb=args.catchup_mb, size=args.catchup_size, repeat=args.repeat
        ),
        "memory": lambda servers: memory.measure(
            servers, subscribers=args.idle, size=args.size, settle=args.settle
        ),
    }
    for part in args.parts:
        results[part] = await _with_servers(args.targets, tmp / part, measures[part])
    results["load_average_1m_after"] = environment()["load_average_1m"]
    return results


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, min(hard, 4 * args.idle + 1024, 65536))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the servers inherit it
    if any(name.startswith("reference") for name in args.targets):
        install_reference()
    with tempfile.TemporaryDirectory(prefix="sandstream-streams-bench-") as name:
        results = trio.run(_run, args, Path(name))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        env = results["environment"]
        print(
            f"{env['cpus']} CPUs, Python {env['python']}, load {env['load_average_1m']} -> "
            f"{results['load_average_1m_after']}\n"
        )
        print(render(results, args.targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
