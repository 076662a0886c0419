"""One :class:`LogMover` in a process of its own, to be SIGKILLed or SIGSTOPped.

``.venv/bin/python -m benchmarks.support.mover_process --db DB --runner-url URL --token TOKEN
--session ID --owner NAME [--redis-url URL] [--ttl S] [--heartbeat S]`` moves one
session of a remote runner over its WebSocket under a lease (in the chat database
``DB``, a SQLite file or a ``postgresql://`` URL, migrated if new; or in Redis with
``--redis-url``), as a replica would: it folds the chunks into a chat turn's message
(:class:`Folds`) and keeps a copy of them in ``DB``. It prints ``terminal
<generation>`` when the session settles and ``outcome <outcome>`` when the move
returns. The takeover tests and the mover benchmark kill it
mid-session.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

import psycopg
import trio

from sandstream.core import DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_STEP_BYTES, DEFAULT_MAX_STEPS
from sandstream.server.chat import TurnFold
from sandstream.server.chat.mover import Lease, LogMover, OpenSessionRef, RemoteSource, open_lease
from sandstream.server.chat.store.database import Database
from sandstream.server.chat.store.migrations import migrate, migrate_postgres
from sandstream.server.chat.store.moved_runs import MovedChunks
from sandstream.server.databases.postgres import PostgresDatabase
from sandstream.server.databases.sqlite import SQLiteDatabase


class Folds:
    """Makes each session's fold (the chat's, with its default limits), and keeps the
    one settled last."""

    def __init__(self) -> None:
        self.settled: TurnFold | None = None

    def new(self, ref: OpenSessionRef) -> TurnFold:
        return TurnFold(
            max_steps=DEFAULT_MAX_STEPS,
            max_step_bytes=DEFAULT_MAX_STEP_BYTES,
            max_line_bytes=DEFAULT_MAX_LINE_BYTES,
        )

    async def settle(self, ref: OpenSessionRef, generation: int, fold: TurnFold) -> None:
        self.settled = fold


async def _run_owner(args: argparse.Namespace) -> None:
    db: Database
    if args.db.startswith("postgresql://"):
        db = await PostgresDatabase.open(args.db, migrate=migrate_postgres)
    else:
        db = await SQLiteDatabase.open(Path(args.db), migrate=migrate)
    lease: Lease
    try:
        async with open_lease(args.redis_url, db) as lease:
            ref = OpenSessionRef(args.session, args.runner_url)
            source = RemoteSource(args.runner_url, args.token)

            async def live() -> list[OpenSessionRef]:
                return [ref]

            async def settled(ref: OpenSessionRef, generation: int, fold: TurnFold) -> None:
                print(f"terminal {generation}", flush=True)

            mover = LogMover(
                lease,
                MovedChunks(db),
                lambda _ref: source,
                args.owner,
                open_sessions=live,
                new_fold=Folds().new,
                on_terminal=settled,
                keep_chunks=True,
                ttl=args.ttl,
                heartbeat=args.heartbeat,
            )
            print(f"outcome {await mover.move(ref)}", flush=True)
    finally:
        await db.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m benchmarks.support.mover_process", description=__doc__
    )
    parser.add_argument("--db", required=True, help="a SQLite file, or a postgresql:// URL")
    parser.add_argument("--redis-url")
    parser.add_argument("--runner-url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--session", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--heartbeat", type=float, default=0.25)
    try:
        trio.run(_run_owner, parser.parse_args(argv))
    except (sqlite3.Error, psycopg.Error) as exc:
        sys.exit(f"mover: {exc}")


if __name__ == "__main__":
    main()
