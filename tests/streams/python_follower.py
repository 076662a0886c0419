"""Follows a Durable Stream live from its start with the official Python client (PyPI
``durable-streams``), for test_clients.py. A script::

    python python_follower.py '{"url": URL, "live": "long-poll"|"sse", "json": B, "token": T}'

Reads from offset ``-1`` with ``stream(live=...)``: bytes, or with ``json`` the JSON
messages (``iter_events``). ``token`` (optional) is sent as a bearer token. Prints one
JSON line per event, as it happens, in the shape of tests/node/durable_streams/
follow_client.mjs: ``{"request": {"live": L}}`` for each request, ``{"ready": true}``
once the first response is in, ``{"data": BASE64}`` or ``{"items": [...]}`` for each
delivery, and ``{"end": {"streamClosed": B}}`` when the session ended by itself; then
exits 0. Any error propagates (a traceback, exit 1).

The client (0.1.0) predates stream closure: its long-poll session never ends by itself.
The httpx client it is given ends it where the protocol says the stream is over: a
response marked ``Stream-Closed: true`` that carries no data raises
:class:`StreamEnded` out of the session (``streamClosed: true``). Its SSE session ends
when the server ends the event stream; the client cannot tell why
(``streamClosed: null``).
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import httpx
from durable_streams import LiveMode, stream


class StreamEnded(Exception):
    """The server said the stream is closed and nothing is left to read."""


def _print(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def _on_request(request: httpx.Request) -> None:
    live = parse_qs(urlsplit(str(request.url)).query).get("live", [None])[0]
    _print({"request": {"live": live}})


def _on_response(response: httpx.Response) -> None:
    closed = response.headers.get("stream-closed", "").lower() == "true"
    empty = response.status_code == 204 or response.headers.get("content-length") == "0"
    if closed and empty:
        raise StreamEnded


def follow(url: str, live: str, as_json: bool, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    hooks: dict[str, list[Callable[..., Any]]] = {
        "request": [_on_request],
        "response": [_on_response],
    }
    with httpx.Client(timeout=60.0, event_hooks=hooks) as client:
        try:
            mode = cast(LiveMode, live)
            with stream(url, offset="-1", live=mode, headers=dict(headers), client=client) as res:
                _print({"ready": True})
                if as_json:
                    for event in res.iter_events(mode="json_batches"):
                        _print({"items": event.data, "offset": event.next_offset})
                else:
                    for event in res.iter_events(mode="text" if live == "sse" else "bytes"):
                        data = event.data.encode() if isinstance(event.data, str) else event.data
                        encoded = base64.b64encode(data).decode()
                        _print({"data": encoded, "offset": event.next_offset})
        except StreamEnded:
            _print({"end": {"streamClosed": True}})
            return
    _print({"end": {"streamClosed": None}})


def main() -> None:
    options = json.loads(sys.argv[1])
    follow(options["url"], options["live"], bool(options.get("json")), options.get("token"))


if __name__ == "__main__":
    main()
