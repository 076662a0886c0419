"""A remote runner's refusal, read for its detail: bounded, problem JSON or text."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from sandstream.server.chat.model.runner_answers import ERROR_BODY_LIMIT, answer_detail


class _Endless(httpx.AsyncByteStream):
    """A body that never ends, counting what was read of it."""

    def __init__(self) -> None:
        self.read = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            self.read += 4096
            yield b"x" * 4096


async def test_problem_json_gives_its_detail_else_its_title() -> None:
    detailed = httpx.Response(503, json={"title": "Busy", "detail": "at capacity (4 live)"})
    titled = httpx.Response(422, json={"title": "Invalid dispatch"})
    assert await answer_detail(detailed) == "at capacity (4 live)"
    assert await answer_detail(titled) == "Invalid dispatch"


async def test_other_bodies_are_quoted_clipped_or_give_nothing() -> None:
    assert await answer_detail(httpx.Response(502, content=b"<html>bad gateway")) == (
        "<html>bad gateway"
    )
    assert await answer_detail(httpx.Response(502, content=b"\xff" + b"a" * 500)) == (
        "\ufffd" + "a" * 199
    )
    assert await answer_detail(httpx.Response(500, json=["not", "a", "problem"])) == ""
    assert await answer_detail(httpx.Response(500)) == ""


async def test_an_endless_body_is_read_only_up_to_the_limit() -> None:
    stream = _Endless()
    detail = await answer_detail(httpx.Response(500, stream=stream))
    assert detail == "x" * 200
    assert ERROR_BODY_LIMIT <= stream.read < ERROR_BODY_LIMIT + 4096
