"""One turn's model gateway in a process of its own, as the runner holds it (every
model call metered, :class:`~sandstream.server.runner.metering.UsageMetering`): calls
go to the OpenAI provider at ``argv[1]`` with key ``argv[2]``; prints
``{"url", "credential"}`` on one line once it listens, serves until killed."""

from __future__ import annotations

import json
import sys

import trio

from sandstream.server.gateway import TurnGateway
from sandstream.server.runner.metering import UsageMetering


async def main(base_url: str, key: str) -> None:
    gateway = TurnGateway(
        "turn_benchmark",
        {"OPENAI_API_KEY": key, "OPENAI_BASE_URL": base_url},
        unavailable_after=3600.0,
        on_failure=lambda failure: print(failure.describe(), file=sys.stderr, flush=True),
        on_unavailable=lambda failure: None,
        observers=[UsageMetering(lambda turn_id: None)],
    )
    async with trio.open_nursery() as nursery:
        access = await nursery.start(gateway.serve)
        print(json.dumps({"url": access.url, "credential": access.credential}), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
