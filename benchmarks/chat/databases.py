"""Chat benchmark on both chat stores: the same chat turn on SQLite and on PostgreSQL.

``.venv/bin/python -m benchmarks.chat.databases [--lines N] [--payload B] [--repeat R] [--json]``
(from the checkout: the ``benchmarks`` package is not installed)

Two ``sandstream serve`` processes, each with its embedded runner, side by side: one
on SQLite in its data dir (the embedded default), one on a real PostgreSQL server
started for the run (Debian's ``postgresql``, :mod:`benchmarks.support.postgres_server`,
with PostgreSQL's own durable settings: fsync, synchronous commits), its own address as
``--public-url``. Each round runs one chat turn of ``--lines`` unpaced step lines on
each, the order alternating by round, and reads it as :mod:`benchmarks.chat.run` does:

- *chat SSE*: step events/s from the first step frame to the last;
- *to done*: step events/s from the first step frame to ``done`` (the turn stored);
- *settle*: the seconds from the last step frame to ``done``: the last chunks folded,
  the message stored.

Medians over ``--repeat`` rounds; PostgreSQL ÷ SQLite beside them. Each step says on
stderr what it starts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

import msgspec
import trio

from benchmarks.chat.run import TooShortToTimeError, _chat_rate, _config
from benchmarks.chat.serving import serve
from benchmarks.runner.support import environment
from benchmarks.support.ports import free_port
from benchmarks.support.postgres_server import PostgresServer, open_postgres_server
from benchmarks.support.report import progress

STORES: Final = ("sqlite", "postgresql")


async def run(lines: int, payload: int, repeat: int, postgres: PostgresServer) -> dict[str, Any]:
    figures: dict[str, dict[str, list[float]]] = {
        store: {"chat": [], "to_done": [], "settle": []} for store in STORES
    }
    config = _config(lines, payload)
    with tempfile.TemporaryDirectory(prefix="sandstream-bench-databases-") as tmp:
        agent_config = Path(tmp) / "agent.json"
        agent_config.write_bytes(msgspec.json.encode(config))
        async with trio.open_nursery() as nursery:
            progress("starting sandstream serve on SQLite and on PostgreSQL")
            port = free_port()
            database = await trio.to_thread.run_sync(postgres.create_database)
            urls = {"sqlite": (await serve(nursery, Path(tmp) / "sqlite", agent_config)).url}
            flags = ["--database-url", database, "--port", str(port)]
            flags += ["--public-url", f"http://127.0.0.1:{port}"]
            on_postgres = Path(tmp) / "postgresql"
            urls["postgresql"] = (await serve(nursery, on_postgres, agent_config, *flags)).url
            with trio.fail_after(repeat * 600):
                for round_ in range(1, repeat + 1):
                    order = STORES if round_ % 2 else STORES[::-1]
                    for store in order:
                        progress(f"round {round_}/{repeat}: a turn on {store}, {lines:,} lines")
                        turn = await _chat_rate(urls[store])
                        figures[store]["chat"].append(turn.rate)
                        figures[store]["to_done"].append(turn.rate_to_done)
                        figures[store]["settle"].append(turn.settle)
                        print(
                            f"{store}: chat {turn.rate:,.0f} events/s ({turn.steps}), "
                            f"{turn.rate_to_done:,.0f}/s to done, settle {turn.settle:.3f} s",
                            file=sys.stderr,
                        )
            nursery.cancel_scope.cancel()
    medians = {
        store: {name: statistics.median(values) for name, values in measured.items()}
        for store, measured in figures.items()
    }
    return {
        "lines": lines,
        "payload_bytes": payload,
        "repeat": repeat,
        "chat_events_per_s": {s: round(medians[s]["chat"]) for s in STORES},
        "chat_events_per_s_to_done": {s: round(medians[s]["to_done"]) for s in STORES},
        "settle_seconds": {s: round(medians[s]["settle"], 3) for s in STORES},
        "postgresql_over_sqlite": {
            name: round(medians["postgresql"][name] / medians["sqlite"][name], 2)
            for name in ("chat", "to_done", "settle")
        },
        "environment": environment(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m benchmarks.chat.databases", description=__doc__
    )
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--payload", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    progress("starting PostgreSQL (initdb, durable settings)")
    try:
        with open_postgres_server(durable=True) as postgres:
            result = trio.run(run, args.lines, args.payload, args.repeat, postgres)
    except* TooShortToTimeError as group:
        sys.exit(f"{parser.prog}: {group.exceptions[0]}")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    ratio = result["postgresql_over_sqlite"]
    rows = (
        ("chat SSE, events/s", "chat_events_per_s", "chat"),
        ("chat SSE to done, events/s", "chat_events_per_s_to_done", "to_done"),
        ("settle, s", "settle_seconds", "settle"),
    )
    print(f"{'':28} {'SQLite':>12} {'PostgreSQL':>12} {'PG ÷ SQLite':>12}")
    for label, key, name in rows:
        sqlite, pg = result[key]["sqlite"], result[key]["postgresql"]
        print(f"{label:28} {sqlite:>12,} {pg:>12,} {ratio[name]:>12}")
    print(f"load average (1 min): {result['environment']['load_average_1m']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
