"""Whatever a provider answers passes through the gateway byte for byte: any bytes (not
UTF-8, not JSON, an SSE stream), in any pieces, framed by length, chunks or the
connection's end; an answer cut mid-way reaches the client cut at the same byte; the
gateway serves on. A call's observer sees the same bytes, then its end or its cut."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Final, Literal

import httpx
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandstream.server.gateway import CallFailure, ProxiedCall, TurnGateway
from sandstream.server.gateway.health import MESSAGE_LIMIT, error_message

Framing = Literal["length", "chunked", "close"]
SSE: Final = b'event: message_start\ndata: {"type":"message_start"}\n\nevent: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"h\xc3\xa9"}}\n\n'  # noqa: E501


@dataclass
class Answer:
    """What the raw upstream answers: ``body`` in ``pieces``, framed by ``framing``,
    cut after ``cut`` bytes of the body (``None``: whole)."""

    status: int
    body: bytes
    pieces: list[int]
    framing: Framing
    cut: int | None


@dataclass
class Recorder:
    """An observer keeping what it was told."""

    status: int | None = None
    chunks: list[bytes] = field(default_factory=list)
    ending: str | None = None

    def response(self, status: int, reason: str, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status

    def chunk(self, data: bytes) -> None:
        self.chunks.append(data)

    def end(self) -> None:
        self.ending = "end"

    def cut(self, reason: str, *, upstream: bool) -> None:
        self.ending = "cut" if upstream else "left"


def _split(body: bytes, pieces: list[int]) -> list[bytes]:
    points = sorted({p % (len(body) + 1) for p in pieces})
    edges = [0, *points, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(edges) if b > a]


async def _answer(stream: trio.SocketStream, answer: Answer) -> None:
    async with stream:
        head = b""
        while b"\r\n\r\n" not in head:
            head += await stream.receive_some(65536)
        headers = [b"HTTP/1.1 %d X" % answer.status, b"content-type: text/event-stream"]
        body = answer.body if answer.cut is None else answer.body[: answer.cut]
        if answer.framing == "length":
            headers.append(b"content-length: %d" % len(answer.body))
        elif answer.framing == "chunked":
            headers.append(b"transfer-encoding: chunked")
        else:
            headers.append(b"connection: close")
        await stream.send_all(b"\r\n".join(headers) + b"\r\n\r\n")
        for piece in _split(body, answer.pieces):
            data = b"%x\r\n%s\r\n" % (len(piece), piece) if answer.framing == "chunked" else piece
            await stream.send_all(data)
        if answer.framing == "chunked" and answer.cut is None:
            await stream.send_all(b"0\r\n\r\n")


async def _through(answer: Answer) -> tuple[bytes, bool, Recorder, list[CallFailure]]:
    """The body the client got through a gateway, whether it was cut, what the observer
    saw, the failures noted; and checks that the gateway answers again after it."""
    recorder = Recorder()
    failures: list[CallFailure] = []
    async with trio.open_nursery() as nursery:
        [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listener.socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, lambda s: _answer(s, answer), [listener])

        def observe(call: ProxiedCall) -> Recorder:
            return recorder

        gateway = TurnGateway(
            "turn_t",
            {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"},
            unavailable_after=60.0,
            on_failure=failures.append,
            on_unavailable=lambda failure: None,
            observers=[observe],
        )
        access = await nursery.start(gateway.serve)
        auth = {"authorization": f"Bearer {gateway.credential}"}
        got = b""
        cut = False
        async with httpx.AsyncClient(base_url=access.url, headers=auth, timeout=30) as client:
            try:
                async with client.stream(
                    "POST", "/openai/chat/completions", content=b""
                ) as response:
                    assert response.status_code == answer.status
                    async for chunk in response.aiter_raw():
                        got += chunk
            except httpx.RemoteProtocolError:
                cut = True
            again = await client.get("/openai/models", headers={"authorization": "Bearer no"})
            assert again.status_code == 401
        nursery.cancel_scope.cancel()
    return got, cut, recorder, failures


answers = st.builds(
    Answer,
    status=st.sampled_from([200, 500, 429]),
    body=st.binary(min_size=1, max_size=3000) | st.just(SSE) | st.just(b"\xff\xfe{not json"),
    pieces=st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
    framing=st.sampled_from(["length", "chunked", "close"]),
    cut=st.none() | st.integers(min_value=0, max_value=3000),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers)
def test_any_answer_passes_byte_for_byte(answer: Answer) -> None:
    if answer.cut is not None:
        answer.cut = min(answer.cut, len(answer.body) - 1)
    got, cut, recorder, failures = trio.run(_through, answer)
    cut_short = answer.cut is not None and answer.framing != "close"
    expected = answer.body if answer.cut is None else answer.body[: answer.cut]
    assert got == expected
    assert cut == cut_short
    assert recorder.status == answer.status
    assert b"".join(recorder.chunks) == expected
    assert recorder.ending == ("cut" if cut_short else "end")
    failed = cut_short or answer.status != 200
    assert len(failures) == int(failed)
    if failures and not cut_short:
        assert failures[0].status == answer.status


@given(
    st.binary(max_size=2000)
    | st.builds(lambda m: b'{"error": {"message": %s}}' % m, st.binary(max_size=50))
)
def test_any_error_body_gives_a_short_message(body: bytes) -> None:
    message = error_message(body)
    assert message and len(message) <= MESSAGE_LIMIT
