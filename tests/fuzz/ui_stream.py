"""Coverage-guided fuzzing of the UI message stream writer (core/ui_message_stream.py).

    python -m tests.fuzz.ui_stream [CORPUS_DIR ...] [libFuzzer flags]

An input (:class:`~tests.fuzz.harness.Input`, two option bytes): byte 0 the client's
``ai`` major version (5, 6 or 7), byte 1 bit 0 the mode: ``raw`` (the stream is the
chat's SSE as is) or ``generated`` (a :class:`~tests.fuzz.values.Recipe` for envelope
lines, steps, deltas, permissions, logs, terminals, some broken, which the core's
:class:`~sandstream.core.StreamProcessor` turns into the chat's SSE as the chat does,
with ``files`` frames, pings and frames the chat never sends in between).
:func:`check` feeds the SSE in pieces and whole and asserts that

- bad input raises :class:`~sandstream.core.errors.UIMessageStreamError` and nothing
  else, whatever the chunking, and the stream then accepts nothing more;
- otherwise every chunking gives the same bytes, and they are a UI message stream:
  SSE frames of JSON chunks, ``start`` first, ``finish`` and ``[DONE]`` last.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import atheris

with atheris.instrument_imports(include=["sandstream.core"]):
    from sandstream.core import StreamProcessor
    from sandstream.core.errors import UIMessageStreamError
    from sandstream.core.sse_parser import SSEParser
    from sandstream.core.ui_message_stream import UIMessageStream

from tests.fuzz.harness import Input, fuzz, pieces
from tests.fuzz.values import Recipe, scale

__all__ = ["UIStreamMismatch", "check", "generate"]

EXAMPLE_TURN = (
    b'{"type":"step","id":"s1","name":"search","status":"running","args":{"q":"x"}}\n'
    b'{"type":"delta","id":"m1","kind":"reasoning","text":"Thinking"}\n'
    b'{"type":"permission","id":"p1","status":"pending","step":"s1","title":"Run?",'
    b'"options":[{"id":"o1","kind":"allow_once","name":"Yes"}]}\n'
    b'{"type":"permission","id":"p1","status":"resolved","reply":"once"}\n'
    b'{"type":"step","id":"s1","name":"search","status":"succeeded","result":[1]}\n'
    b'{"type":"delta","id":"m2","kind":"text","text":"Hello "}\n'
    b'{"type":"delta","id":"m2","kind":"text","text":"world"}\n'
    b'{"type":"result","message":"Hello world"}\n'
)


class UIStreamMismatch(AssertionError):
    """Pieces and whole disagreed, or the output is no UI message stream."""


def _envelope(recipe: Recipe) -> Any:
    kind = recipe.number(0, 8)
    steps = ("s1", "s2", recipe.text(4))
    if kind <= 1:
        step: dict[str, Any] = {"type": "step", "id": recipe.pick(*steps), "name": recipe.text(8)}
        step["status"] = recipe.pick("running", "succeeded", "failed")
        for key in ("args", "result", "error"):
            if recipe.flag():
                step[key] = recipe.value(2) if key != "error" else recipe.text()
        return step
    if kind <= 3:
        return {
            "type": "delta",
            "id": recipe.pick("m1", "m2", recipe.text(4)),
            "kind": recipe.pick("text", "reasoning"),
            "text": recipe.text(30),
        }
    if kind == 4:
        permission: dict[str, Any] = {
            "type": "permission",
            "id": recipe.pick("p1", "p2"),
            "status": recipe.pick("pending", "resolved"),
        }
        if recipe.flag():
            permission["step"] = recipe.pick(*steps)
        if permission["status"] == "pending":
            permission["options"] = [
                {
                    "id": "o1",
                    "kind": recipe.pick(
                        "allow_once", "allow_always", "reject_once", "reject_always"
                    ),
                }
            ]
        else:
            permission["reply"] = recipe.pick("once", "always", "reject", "cancelled")
        return permission
    if kind == 5:
        return {"type": "log", "level": "info", "message": recipe.text()}
    if kind == 6:
        return recipe.pick(
            {"type": "result", "message": recipe.text(40)},
            {"type": "error", "code": recipe.text(8), "message": recipe.text()},
        )
    return recipe.value(2)


def _frame(recipe: Recipe) -> bytes:
    """A frame the chat adds (files), a ping, or one the chat never sends."""
    kind = recipe.number(0, 3)
    if kind == 0:
        return b": ping\n\n"
    event = recipe.pick("files", "step", "result", "delta", "permission", "error", recipe.text(6))
    data = (
        {
            "files": [
                {
                    "id": recipe.text(6),
                    "name": recipe.text(),
                    "size": recipe.number(0, 9),
                    "contentType": recipe.text(10),
                }
            ]
        }
        if kind == 1
        else recipe.value(2)
    )
    body = json.dumps(data).replace("\n", "\ndata: ")
    return f"event: {event}\ndata: {body}\n\n".encode("utf-8", "surrogatepass")


def generate(recipe: Recipe) -> bytes:
    """The chat's SSE for a turn, as a recipe says."""
    processor = StreamProcessor("sse", extensions=["live"])
    out = bytearray()
    while recipe.left and len(out) < 8 * 1024:
        if recipe.number(0, 7) == 0:
            out += _frame(recipe)
        else:
            out += processor.feed(recipe.line(_envelope(recipe)))
    return bytes(out + processor.close())


def run(parts: list[bytes], ai_version: int) -> bytes | None:
    """The UI stream's bytes (``None``: the input was refused)."""
    stream = UIMessageStream("msg_1", file_url=lambda blob: f"/files/{blob}", ai_version=ai_version)
    out = bytearray()
    try:
        for part in parts:
            out += stream.feed(part)
    except UIMessageStreamError:
        if stream.feed(b"data: x\n\n") or stream.close():
            raise UIStreamMismatch("the stream went on after refusing its input") from None
        return None
    out += stream.close()
    if stream.close() or stream.feed(b"event: result\ndata: {}\n\n"):
        raise UIStreamMismatch("the stream went on after it finished")
    return bytes(out)


def check_frames(out: bytes) -> None:
    parser = SSEParser(max_line_chars=1 << 24, max_data_chars=1 << 24)
    data = [event.data for event in parser.feed(out)]
    if parser.buffered or data[-1:] != ["[DONE]"]:
        raise UIStreamMismatch(f"not ended by [DONE]: {out[-200:]!r}")
    chunks = [json.loads(item) for item in data[:-1]]
    types = [chunk["type"] for chunk in chunks]
    if types[:1] != ["start"] or types[-1:] != ["finish"] or types.count("start") != 1:
        raise UIStreamMismatch(f"chunks {types!r}")


def check(data: bytes) -> None:
    case = Input.decode(data, 2)
    ai_version = 5 + case.options[0] % 3
    stream, cuts = case.stream, case.cuts
    if case.options[1] & 1:
        stream = generate(Recipe(case.stream))
        cuts = scale(cuts, len(case.stream), len(stream))
    whole = run([stream], ai_version)
    got = run(pieces(stream, cuts), ai_version)
    if (got is None) != (whole is None) or (whole is not None and got != whole):
        raise UIStreamMismatch(f"{got!r}\n  != {whole!r}")
    if whole is not None:
        check_frames(whole)


def test_one_input(data: bytes) -> None:
    check(data)


def seeds() -> Iterator[bytes]:
    chat = StreamProcessor("sse", extensions=["live"])
    sse = chat.feed(EXAMPLE_TURN) + chat.close()
    for version in (0, 1, 2):
        yield Input(bytes([version, 0]), tuple(range(5, len(sse), 41))[:16], sse).encode()
        yield Input(bytes([version, 1]), (3, 90, 400), EXAMPLE_TURN).encode()


def main() -> None:
    fuzz(test_one_input, seeds)


if __name__ == "__main__":
    main()
