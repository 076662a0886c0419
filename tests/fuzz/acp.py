"""Coverage-guided fuzzing of the ACP client's input: JSON-RPC framing, the connection's
reader and the translator of ``session/update``.

    python -m tests.fuzz.acp [CORPUS_DIR ...] [libFuzzer flags]

An input (:class:`~tests.fuzz.harness.Input`, three option bytes): byte 0 the line bound
(64-319 bytes, so that long lines are cut), byte 1 how much of each string such a line
keeps, byte 2 bit 0 the mode: ``raw`` (the stream is the agent's stdout as is) or
``generated`` (a :class:`~tests.fuzz.values.Recipe` for JSON-RPC lines: updates of
every kind ACP has, permission requests, responses, errors, any JSON, broken lines).
:func:`check` asserts that

- :class:`~sandstream.container.agents.acp.wire.MessageReader` gives the same messages
  fed in pieces as fed whole, and for bad input a ``ProtocolError`` and nothing else;
  each message reads back as itself once encoded (round-trip);
- the :class:`~sandstream.container.agents.acp.connection.Connection` reading the
  pieces from a trio stream hands the handler exactly those messages in order, answers
  each request it does not know ``-32601``, and fails with a ``ProtocolError`` at the
  first bad line, response to no request or update that is not ACP, else with
  ``AgentExitedError`` at the end of the output;
- the :class:`~sandstream.container.agents.acp.translate.Translator` turns those updates
  into the same lines however the stream was cut, and its message is exactly its
  text deltas, concatenated.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["sandstream.container.agents.acp"]):
    import msgspec
    import pydantic
    import trio
    import trio.testing
    from acp.schema import SessionNotification

    from sandstream.container.agents.acp.connection import Connection
    from sandstream.container.agents.acp.errors import AgentExitedError, ProtocolError
    from sandstream.container.agents.acp.translate import Translator
    from sandstream.container.agents.acp.wire import (
        DEFAULT_KEEP_STRING_BYTES,
        DEFAULT_MAX_LINE_BYTES,
        METHOD_NOT_FOUND,
        ErrorResponse,
        Message,
        MessageReader,
        Notification,
        Request,
        encode,
        parse,
    )
    from sandstream.core.envelope import Delta
    from sandstream.core.json_input import decode_json

from tests.fuzz.harness import Input, fuzz, pieces
from tests.fuzz.values import Recipe, scale

__all__ = ["AcpMismatch", "check", "generate"]

DATA = Path(__file__).resolve().parents[1] / "data" / "acp"
UPDATE = "session/update"


class AcpMismatch(AssertionError):
    """Pieces and whole disagreed, a message did not round-trip, or the connection did
    not do what its messages say."""


def generate(recipe: Recipe) -> bytes:
    """JSON-RPC lines an ACP agent could write, as a recipe says."""
    out = bytearray()
    while recipe.left and len(out) < 8 * 1024:
        kind = recipe.number(0, 6)
        obj: Any = {"jsonrpc": "2.0"}
        if kind <= 2:
            obj |= {"method": UPDATE, "params": {"sessionId": "s", "update": _update(recipe)}}
        elif kind == 3:
            obj |= {
                "id": recipe.pick(0, "p1", recipe.value(0)),
                "method": recipe.pick(
                    "session/request_permission", "fs/read_text_file", recipe.text()
                ),
                "params": {
                    "sessionId": "s",
                    "toolCall": _tool_call(recipe, "tool_call_update"),
                    "options": recipe.value(2),
                },
            }
        elif kind == 4:
            obj |= {"id": recipe.value(0), "result": recipe.value(2)}
        elif kind == 5:
            obj |= {
                "id": recipe.value(0),
                "error": {"code": recipe.value(0), "message": recipe.text()},
            }
        else:
            obj = recipe.value()
        if recipe.number(0, 15) == 0 and isinstance(obj, dict):
            obj.pop(recipe.pick("jsonrpc", "method", "params", "id"), None)
        out += recipe.line(obj)
    return bytes(out)


def _tool_call(recipe: Recipe, kind: str) -> dict[str, Any]:
    call: dict[str, Any] = {
        "sessionUpdate": kind,
        "toolCallId": recipe.pick("t1", "t2", recipe.text(6)),
    }
    for key, value in (
        ("title", lambda: recipe.text()),
        ("kind", lambda: recipe.pick("read", "edit", "execute", "other", recipe.text(6))),
        ("status", lambda: recipe.pick("pending", "in_progress", "completed", "failed")),
        ("rawInput", lambda: recipe.value(2)),
        ("rawOutput", lambda: recipe.value(2)),
        (
            "content",
            lambda: [
                {"type": "content", "content": {"type": "text", "text": recipe.text(200)}}
                for _ in range(recipe.number(0, 2))
            ],
        ),
        ("_meta", lambda: {"terminal_output": {"data": recipe.text(100)}}),
    ):
        if recipe.flag():
            call[key] = value()
    return call


def _update(recipe: Recipe) -> Any:
    kind = recipe.number(0, 6)
    if kind <= 1:
        chunk = recipe.pick("agent_message_chunk", "agent_thought_chunk")
        content = (
            {"type": "text", "text": recipe.text(60)} if recipe.number(0, 7) else recipe.value(1)
        )
        return {"sessionUpdate": chunk, "content": content}
    if kind <= 3:
        return _tool_call(recipe, recipe.pick("tool_call", "tool_call_update"))
    if kind == 4:
        return {
            "sessionUpdate": "plan",
            "entries": [
                {
                    "content": recipe.text(),
                    "priority": "high",
                    "status": recipe.pick("pending", "completed"),
                }
                for _ in range(recipe.number(0, 2))
            ],
        }
    if kind == 5:
        return {"sessionUpdate": "current_mode_update", "currentModeId": recipe.text(8)}
    return recipe.value(2)


# --- the reader -------------------------------------------------------------------------


def read(parts: list[bytes], bound: int, keep: int) -> tuple[list[Message], str | None]:
    """The messages, and the reader's error (``None``: the output ended well)."""
    reader = MessageReader(bound, keep)
    messages: list[Message] = []
    try:
        for part in parts:
            messages += reader.feed(part)
        messages += reader.close()
    except ProtocolError as exc:
        return messages, exc.message
    return messages, None


def _round_trip(message: Message) -> None:
    again = parse(decode_json(encode(message)))
    if again != message:
        raise AcpMismatch(f"round-trip: {message!r} -> {again!r}")


# --- the translator ---------------------------------------------------------------------


class Recorder:
    """The connection's handler: records what it gets, translates the updates."""

    def __init__(self) -> None:
        self.seen: list[Message] = []
        counter = itertools.count()
        self.translator = Translator(live=True, step_ids=lambda: f"step{next(counter)}")
        self.lines: list[Any] = []

    def notification(self, method: str, params: Any) -> None:
        self.seen.append(Notification(method, params))
        if method == UPDATE:
            self.lines += self.translator.update(update(params), 0)

    def request(self, method: str, params: Any) -> Awaitable[Any] | None:
        self.seen.append(Request(-1, method, params))  # the id is the connection's business
        return None


def update(params: Any) -> Any:
    """The update of a ``session/update`` (as the session validates it)."""
    try:
        return SessionNotification.model_validate(params).update
    except pydantic.ValidationError as exc:
        raise ProtocolError(
            f"session/update does not match ACP: {exc.errors()[0]['msg']}"
        ) from None


def translated(recorder: Recorder) -> bytes:
    """The translator's lines with its message ids numbered in order of appearance."""
    ids: dict[str, str] = {}
    lines = []
    for line in recorder.lines:
        if isinstance(line, Delta):
            line = msgspec.structs.replace(line, id=ids.setdefault(line.id, f"m{len(ids)}"))
        lines.append(line)
    texts = "".join(line.text for line in lines if isinstance(line, Delta) and line.kind == "text")
    if texts != recorder.translator.message:
        raise AcpMismatch(f"message {recorder.translator.message!r} != text deltas {texts!r}")
    return msgspec.json.encode(lines)


# --- the connection ---------------------------------------------------------------------


def expected(messages: list[Message], error: str | None) -> tuple[Recorder, type[Exception]]:
    """What the connection should hand the handler, and how it should fail."""
    recorder = Recorder()
    for message in messages:
        if isinstance(message, Notification):
            try:
                recorder.notification(message.method, message.params)
            except ProtocolError:
                return recorder, ProtocolError
        elif isinstance(message, Request):
            recorder.request(message.method, message.params)
        else:  # a response to no request (none was sent), or "could not read"
            return recorder, ProtocolError
    return recorder, AgentExitedError if error is None else ProtocolError


async def connect(parts: list[bytes]) -> tuple[Recorder, Any, bytes]:
    """The connection reading ``parts`` (its reader has the default bounds)."""
    queue = [part for part in parts if part]
    receive = trio.testing.MemoryReceiveStream()

    async def next_piece() -> None:
        if queue:
            receive.put_data(queue.pop(0))
        else:
            receive.put_eof()

    receive.receive_some_hook = next_piece
    send = trio.testing.MemorySendStream()
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        connection = Connection(send, recorder, nursery)
        await connection.read(receive)
    sent = b""
    with contextlib.suppress(trio.WouldBlock):  # nothing was sent
        sent = bytes(send.get_data_nowait())
    return recorder, connection.failure, sent


def _by_line(stream: bytes) -> list[bytes]:
    """The stream cut after each ``\\n``."""
    *lines, last = stream.split(b"\n")
    return [line + b"\n" for line in lines] + [last]


def check(data: bytes) -> None:
    case = Input.decode(data, 3)
    bound = 64 + case.options[0]
    keep = 1 + case.options[1] % (bound // 2)
    stream, cuts = case.stream, case.cuts
    if case.options[2] & 1:
        stream = generate(Recipe(case.stream))
        cuts = scale(cuts, len(case.stream), len(stream))
    parts = pieces(stream, cuts)
    # A line at a time: every message before a bad line comes out (a feed that raises
    # loses the messages it completed, so cut anywhere, a prefix of them does).
    whole = read(_by_line(stream), bound, keep)
    got = read(parts, bound, keep)
    if (
        got[1] != whole[1]
        or got[0] != whole[0][: len(got[0])]
        or (got[1] is None and got[0] != whole[0])
    ):
        raise AcpMismatch(f"messages: {got!r}\n  != {whole!r}")
    for message in whole[0]:
        _round_trip(message)
    want, failure = expected(*read(parts, DEFAULT_MAX_LINE_BYTES, DEFAULT_KEEP_STRING_BYTES))
    recorder, error, sent = trio.run(connect, parts)
    if recorder.seen != want.seen or type(error) is not failure:
        raise AcpMismatch(
            f"connection: {recorder.seen!r}, {error!r}\n  != {want.seen!r}, {failure}"
        )
    if translated(recorder) != translated(want):
        raise AcpMismatch("the translator's lines depend on the chunking")
    answers = [parse(decode_json(line)) for line in sent.splitlines()]
    unknown = [m for m in recorder.seen if isinstance(m, Request)]
    if len(answers) != len(unknown) or not all(
        isinstance(a, ErrorResponse) and a.code == METHOD_NOT_FOUND for a in answers
    ):
        raise AcpMismatch(f"answers {answers!r} to the requests {unknown!r}")


def test_one_input(data: bytes) -> None:
    check(data)


def seeds() -> Iterator[bytes]:
    for path in sorted(DATA.glob("*.jsonl")):
        lines = []
        for number, line in enumerate(path.read_bytes().splitlines()):
            record = json.loads(line)
            if record["dir"] == "result":
                message = {"jsonrpc": "2.0", "id": number, "result": record["result"]}
            else:  # a notification, or a request (its method under "request")
                message = {"jsonrpc": "2.0", "params": record["params"]}
                if "request" in record:
                    message |= {"id": number, "method": record["request"]}
                else:
                    message["method"] = record["method"]
            lines.append(json.dumps(message).encode() + b"\n")
        stream = b"".join(lines)
        for bound in (255, 0):
            yield Input(
                bytes([bound, 90, 0]), tuple(range(11, len(stream), 257))[:16], stream
            ).encode()
    yield Input(bytes([100, 20, 1]), (7, 50, 300), bytes(range(256)) * 8).encode()


def main() -> None:
    fuzz(test_one_input, seeds)


if __name__ == "__main__":
    main()
