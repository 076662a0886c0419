"""Coverage-guided fuzzing of the container's stdin: the dispatch, then message lines.

    python -m tests.fuzz.stdin [CORPUS_DIR ...] [libFuzzer flags]

An input (:class:`~tests.fuzz.harness.Input`, two option bytes; its cut points are
ignored, as stdin is read a line at a time): byte 0 says which permission requests the
agent waits on (bit i: ``p{i}``, for i < 3), byte 1 bit 0 the mode: ``raw`` (the
stream is stdin as is) or ``generated`` (a :class:`~tests.fuzz.values.Recipe` for a
dispatch, one line or pretty-printed, then user messages, permission answers and broken
lines). :func:`check`
runs :func:`~sandstream.container.dispatch.read_dispatch`,
:func:`~sandstream.container.dispatch.decode_dispatch` (bad input: ``DispatchError``
only) and :func:`~sandstream.container.inbox.read_messages` with those requests waiting,
and asserts that every line after a one-line dispatch does what the schema says
(core/schemas.py, ``InboundMessage``): a ``message`` reaches the inbox, in order; a
``permission`` answer goes to its waiting request (the first one wins), any other
answer is a warning; anything else is a warning, never a crash; blank lines are skipped.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import atheris

with atheris.instrument_imports(
    include=["sandstream.container.inbox", "sandstream.container.dispatch"]
):
    import trio
    import trio.testing

    from sandstream.container.dispatch import decode_dispatch, read_dispatch
    from sandstream.container.errors import DispatchError
    from sandstream.container.inbox import Inbox, read_messages
    from sandstream.container.output import Emitter
    from sandstream.core.errors import JSONInputError
    from sandstream.core.json_input import decode_json

import contextlib

from tests.fuzz.harness import Input, fuzz
from tests.fuzz.values import Recipe

__all__ = ["StdinMismatch", "check", "generate"]

REQUESTS = ("p0", "p1", "p2")
REPLIES = ("once", "always", "reject")
DISPATCH = {"agent_url": "http://127.0.0.1:9/api", "otp_setup": "s", "otp_run": "r", "prompt": "hi"}


class StdinMismatch(AssertionError):
    """A line did not do what the schema says."""


def generate(recipe: Recipe) -> bytes:
    dispatch: Any = dict(DISPATCH) if recipe.number(0, 7) else recipe.value(2)
    if recipe.flag() and isinstance(dispatch, dict):
        dispatch[recipe.pick("prompt", "agent_url", "extensions")] = recipe.value(1)
    out = bytearray(json.dumps(dispatch, indent=recipe.pick(None, None, None, 2)).encode() + b"\n")
    while recipe.left and len(out) < 8 * 1024:
        kind = recipe.number(0, 4)
        obj: Any
        if kind == 0:
            obj = {"type": "message", "text": recipe.text(40)}
        elif kind <= 2:
            obj = {
                "type": "permission",
                "id": recipe.pick(*REQUESTS, recipe.text(3)),
                "reply": recipe.pick(*REPLIES, recipe.text(5)),
            }
        elif kind == 3:
            obj = {
                "type": recipe.pick("message", "permission", recipe.text(6)),
                recipe.pick("text", "id", "reply"): recipe.value(1),
            }
        else:
            obj = recipe.value(2)
        out += recipe.line(obj)
    return bytes(out)


def inbound(line: bytes) -> tuple[str, str, str] | None:
    """What the schema makes of a line: ``("message", text, "")``, ``("permission", id,
    reply)`` or ``None`` (not a message). Keys may repeat: the first ``type`` picks the
    kind and the others must match it, every value of a field must be valid, the last
    one counts (msgspec's reading of a tagged struct)."""
    try:
        decode_json(line)
    except JSONInputError:
        return None
    pairs = json.loads(line, object_pairs_hook=list)
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
        return None
    fields: dict[str, list[Any]] = {}
    for key, value in pairs:
        fields.setdefault(key, []).append(value)
    kinds = fields.get("type", [])
    if not kinds or any(kind != kinds[0] for kind in kinds):
        return None
    texts, ids, replies = fields.get("text", []), fields.get("id", []), fields.get("reply", [])
    if kinds[0] == "message" and texts and all(isinstance(t, str) for t in texts):
        return "message", texts[-1], ""
    if (
        kinds[0] == "permission"
        and ids
        and all(isinstance(i, str) and i for i in ids)
        and replies
        and all(r in REPLIES for r in replies)
    ):
        return "permission", ids[-1], replies[-1]
    return None


def expected(lines: list[bytes], waiting: set[str]) -> tuple[list[str], dict[str, str], int]:
    """Messages, answers and the number of warnings the schema gives for these lines."""
    messages: list[str] = []
    answers: dict[str, str] = {}
    warnings = 0
    for line in lines:
        if not line.strip():
            continue
        match inbound(line):
            case ("message", text, _):
                messages.append(text)
            case ("permission", request, reply) if request in waiting and request not in answers:
                answers[request] = reply
            case _:
                warnings += 1
    return messages, answers, warnings


async def deliver(rest: io.BytesIO, waiting: set[str]) -> tuple[list[str], dict[str, str], int]:
    inbox = Inbox()
    out = bytearray()
    answers: dict[str, str] = {}

    async def ask(request_id: str) -> None:
        answers[request_id] = await inbox.ask(request_id)

    async with trio.open_nursery() as nursery:
        for request_id in sorted(waiting):
            nursery.start_soon(ask, request_id)
        await trio.testing.wait_all_tasks_blocked()
        await read_messages(rest, inbox, Emitter(out.extend))
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    logs = [json.loads(line) for line in out.splitlines()]
    if any(log["type"] != "log" or log["level"] != "warn" for log in logs):
        raise StdinMismatch(f"not warnings: {logs!r}")
    return inbox.take(), answers, len(logs)


def check(data: bytes) -> None:
    case = Input.decode(data, 2)
    waiting = {request for i, request in enumerate(REQUESTS) if case.options[0] >> i & 1}
    stream = case.stream
    if case.options[1] & 1:
        stream = generate(Recipe(case.stream))
    stdin = io.BytesIO(stream)
    with contextlib.suppress(DispatchError):
        decode_dispatch(read_dispatch(None, stdin))
    rest = stdin.read()
    stdin.seek(len(stream) - len(rest))
    *lines, last = rest.split(b"\n")
    want = expected([line + b"\n" for line in lines] + [last], waiting)
    got = trio.run(deliver, stdin, waiting)
    if got != want:
        raise StdinMismatch(f"{got!r}\n  != {want!r}")


def test_one_input(data: bytes) -> None:
    check(data)


def seeds() -> Iterator[bytes]:
    dispatch = json.dumps(DISPATCH).encode() + b"\n"
    lines = [
        b'{"type":"message","text":"also look at b.txt"}\n',
        b'{"type":"permission","id":"p0","reply":"once"}\n',
        b'{"type":"permission","id":"p0","reply":"always"}\n',
        b'{"type":"permission","id":"p1","reply":"maybe"}\n',
        b"\n",
        b"not json\n",
        b'{"type":"message","text":"\\u00e9t\\u00e9"}',
    ]
    yield Input(bytes([3, 0]), (), dispatch + b"".join(lines)).encode()
    yield Input(bytes([7, 1]), (), dispatch + b"".join(lines)).encode()
    yield Input(bytes([1, 0]), (), json.dumps(DISPATCH, indent=2).encode() + lines[0]).encode()


def main() -> None:
    fuzz(test_one_input, seeds)


if __name__ == "__main__":
    main()
