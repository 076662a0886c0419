"""The ACP JSON-RPC layer: message framing (any chunking), id correlation, handlers,
and every way the agent's side can break the protocol."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.container.agents.acp.connection import Connection, RpcFault, open_connection
from sandstream.container.agents.acp.errors import AgentExitedError, ProtocolError, RemoteError
from sandstream.container.agents.acp.wire import (
    ErrorResponse,
    Message,
    MessageReader,
    Notification,
    Request,
    Response,
    encode,
    parse,
)

# --- framing (sans-IO) ------------------------------------------------------------------

_ids = st.integers(-(2**53), 2**53) | st.text(max_size=40)
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)
_methods = st.text(min_size=1, max_size=30)
_messages = st.one_of(
    st.builds(Request, _ids, _methods, _values),
    st.builds(Notification, _methods, _values),
    st.builds(Response, _ids, _values),
    st.builds(ErrorResponse, _ids | st.none(), st.integers(-32768, 32767), st.text(), _values),
)


def normal(message: Message) -> Message:
    """What a message reads back as (a null params is no params)."""
    return parse(json.loads(encode(message)))


@settings(max_examples=300)
@given(
    messages=st.lists(_messages, min_size=1, max_size=8),
    cuts=st.lists(st.integers(0, 4000), max_size=15),
    crlf=st.booleans(),
)
def test_every_chunking_of_the_output_gives_the_same_messages(
    messages: list[Message], cuts: list[int], crlf: bool
) -> None:
    data = b"".join(encode(m).replace(b"\n", b"\r\n" if crlf else b"\n") for m in messages)
    expected = [normal(m) for m in messages]
    whole = MessageReader()
    assert whole.feed(data) + whole.close() == expected
    points = sorted({min(c, len(data)) for c in cuts})
    reader = MessageReader()
    out: list[Message] = []
    for a, b in itertools.pairwise([0, *points, len(data)]):
        out += reader.feed(data[a:b])
    assert out + reader.close() == expected
    bytewise = MessageReader()
    assert [m for byte in data for m in bytewise.feed(bytes([byte]))] + bytewise.close() == (
        expected
    )


def test_ids_params_and_blank_lines() -> None:
    reader = MessageReader()
    data = (
        b'{"jsonrpc":"2.0","id":"0b6f5c1e-uuid","method":"session/request_permission",'
        b'"params":{"a":1}}\n\n   \n{"jsonrpc":"2.0","id":3,"result":null}\n'
        b'{"jsonrpc":"2.0","method":"session/update"}'
    )
    assert reader.feed(data) + reader.close() == [
        Request("0b6f5c1e-uuid", "session/request_permission", {"a": 1}),
        Response(3, None),
        Notification("session/update"),
    ]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b"Starting agent...", "agent output line 1 is not JSON"),
        (b'{"jsonrpc":"2.0","id":1,"result":', "agent output line 1 is not JSON"),
        (b"[1,2]", "not a JSON object"),
        (b'{"id":1,"result":{}}', 'no "jsonrpc": "2.0"'),
        (b'{"jsonrpc":"1.0","id":1,"result":{}}', 'no "jsonrpc": "2.0"'),
        (b'{"jsonrpc":"2.0","id":true,"result":{}}', "id is not an int or a string"),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"x"}', "id is not an int or a string"),
        (b'{"jsonrpc":"2.0","method":7}', "method is not a string"),
        (b'{"jsonrpc":"2.0","id":1}', "not a request, notification or response"),
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}', "not a request"),
        (b'{"jsonrpc":"2.0","method":"x","params":"\xff"}', "invalid UTF-8"),
    ],
)
def test_bad_lines_are_protocol_errors(line: bytes, error: str) -> None:
    reader = MessageReader()
    with pytest.raises(ProtocolError, match="agent output line 1") as caught:
        reader.feed(line + b"\n")
    assert error in caught.value.message
    assert caught.value.code == "agent_protocol_error"


def test_a_huge_line_has_its_strings_cut_and_a_hopeless_one_is_an_error() -> None:
    reader = MessageReader(max_line_bytes=4096, keep_string_bytes=100)
    update = {"jsonrpc": "2.0", "method": "session/update", "params": {"out": "x" * 100_000}}
    [message] = reader.feed(json.dumps(update).encode() + b"\n")
    assert isinstance(message, Notification)
    assert message.params["out"].startswith("x" * 100)
    assert message.params["out"].endswith("more bytes]")
    with pytest.raises(ProtocolError, match="over 4096 bytes"):
        reader.feed(json.dumps(list(range(5000))).encode() + b"\n")


# --- the connection over real pipes --------------------------------------------------


@dataclass
class Handler:
    """Answers ``echo`` with its params, ``slow`` when ``release`` is set, ``bad`` with
    an error; records notifications."""

    notes: list[tuple[str, Any]] = field(default_factory=list)
    release: trio.Event = field(default_factory=trio.Event)

    def notification(self, method: str, params: Any) -> None:
        if method == "break":
            raise ProtocolError("the test's notification handler refused it")
        self.notes.append((method, params))

    def request(self, method: str, params: Any) -> Awaitable[Any] | None:
        if method == "echo":
            return self._echo(params)
        if method == "slow":
            return self._slow()
        if method == "bad":
            raise RpcFault(-32602, "bad params")
        return None

    async def _echo(self, params: Any) -> Any:
        return params

    async def _slow(self) -> Any:
        await self.release.wait()
        return "released"


@dataclass
class Peer:
    """The agent's end of the pipes: reads what the client sent, writes lines to it."""

    inbound: trio.lowlevel.FdStream
    outbound: trio.lowlevel.FdStream
    buffer: bytearray = field(default_factory=bytearray)

    async def read(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = await self.inbound.receive_some(65536)
            assert chunk, "the client closed its output"
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        decoded: dict[str, Any] = json.loads(line)
        return decoded

    async def write(self, *objs: Any) -> None:
        data = b"".join(
            (obj if isinstance(obj, bytes) else json.dumps({"jsonrpc": "2.0", **obj}).encode())
            + b"\n"
            for obj in objs
        )
        await self.outbound.send_all(data)


@asynccontextmanager
async def connected(handler: Handler) -> AsyncIterator[tuple[Connection, Peer]]:
    to_agent_r, to_agent_w = os.pipe()
    from_agent_r, from_agent_w = os.pipe()
    client_send = trio.lowlevel.FdStream(to_agent_w)
    client_receive = trio.lowlevel.FdStream(from_agent_r)
    peer = Peer(trio.lowlevel.FdStream(to_agent_r), trio.lowlevel.FdStream(from_agent_w))
    async with (
        client_send,
        client_receive,
        peer.inbound,
        peer.outbound,
        open_connection(client_send, client_receive, handler) as connection,
    ):
        yield connection, peer


async def test_answers_are_matched_by_id_in_any_order() -> None:
    async with connected(Handler()) as (connection, peer), trio.open_nursery() as nursery:
        results: dict[str, Any] = {}

        async def ask(method: str) -> None:
            results[method] = await connection.request(method, {"m": method})

        nursery.start_soon(ask, "first")
        first = await peer.read()
        nursery.start_soon(ask, "second")
        second = await peer.read()
        assert (first["id"], second["id"]) == (0, 1)
        assert first["params"] == {"m": "first"}
        await peer.write({"id": 1, "result": "two"}, {"id": 0, "result": {"one": 1}})
    assert results == {"first": {"one": 1}, "second": "two"}


async def test_an_error_answer_raises_remote_error() -> None:
    async with connected(Handler()) as (connection, peer), trio.open_nursery() as nursery:

        async def answer() -> None:
            request = await peer.read()
            error = {"code": -32000, "message": "Authentication required", "data": "no key"}
            await peer.write({"id": request["id"], "error": error})

        nursery.start_soon(answer)
        with pytest.raises(RemoteError) as caught:
            await connection.request("session/new", {})
    assert caught.value.message == "session/new failed (-32000): Authentication required: no key"
    assert caught.value.rpc_code == -32000


def test_an_error_s_structured_data_is_in_its_message_bounded() -> None:
    details = {"details": "No previous sessions found for this project."}
    error = RemoteError("session/load", -32603, "Internal error", details)
    assert error.message == (
        'session/load failed (-32603): Internal error: {"details": '
        '"No previous sessions found for this project."}'
    )
    assert RemoteError("x", 1, "m", None).message == "x failed (1): m"
    long = RemoteError("x", 1, "m", {"d": "y" * 10_000}).message
    assert len(long) < 600 and long.endswith("…")


async def test_requests_from_the_agent_are_answered_with_their_id() -> None:
    handler = Handler()
    async with connected(handler) as (_connection, peer):
        await peer.write(
            {"id": "uuid-1", "method": "slow"},
            {"id": 7, "method": "echo", "params": {"x": [1]}},
            {"id": "uuid-2", "method": "fs/read_text_file", "params": {}},
            {"id": 8, "method": "bad"},
            {"method": "session/update", "params": {"n": 1}},
        )
        answers = [await peer.read() for _ in range(3)]
        handler.release.set()
        answers.append(await peer.read())
    by_id = {answer["id"]: answer for answer in answers}
    assert by_id[7] == {"jsonrpc": "2.0", "id": 7, "result": {"x": [1]}}
    assert by_id["uuid-2"]["error"] == {
        "code": -32601,
        "message": "method not found: fs/read_text_file",
    }
    assert by_id[8]["error"] == {"code": -32602, "message": "bad params"}
    assert answers[-1] == {"jsonrpc": "2.0", "id": "uuid-1", "result": "released"}
    assert handler.notes == [("session/update", {"n": 1})]


@pytest.mark.parametrize(
    ("lines", "error", "message"),
    [
        ([b"not json"], ProtocolError, "agent output line 1 is not JSON"),
        ([{"id": 99, "result": {}}], ProtocolError, "a response to no request (id 99)"),
        ([{"id": None, "error": {"code": -32700, "message": "Parse error"}}], ProtocolError,
         "the agent could not read a message: Parse error (-32700)"),
        ([{"method": "break"}], ProtocolError, "the test's notification handler refused it"),
        ([], AgentExitedError, "the agent closed its output"),
    ],
)  # fmt: skip
async def test_a_broken_agent_fails_the_pending_and_later_requests(
    lines: list[Any], error: type[Exception], message: str
) -> None:
    async with connected(Handler()) as (connection, peer), trio.open_nursery() as nursery:

        async def misbehave() -> None:
            await peer.read()
            if lines:
                await peer.write(*lines)
            else:
                await peer.outbound.aclose()

        nursery.start_soon(misbehave)
        with pytest.raises(error, match=re.escape(message)):
            await connection.request("session/prompt", {})
        with pytest.raises(error, match=re.escape(message)):
            await connection.request("session/prompt", {})
        assert connection.failed.is_set()


async def test_a_cancelled_request_is_abandoned_and_its_late_answer_dropped() -> None:
    async with connected(Handler()) as (connection, peer), trio.open_nursery() as nursery:
        with trio.move_on_after(0.05):  # not a timing assertion: only to abandon it
            await connection.request("slow/thing")
        abandoned = await peer.read()

        async def answer_late_then_the_next() -> None:
            next_request = await peer.read()
            await peer.write(
                {"id": abandoned["id"], "result": "late"},
                {"id": next_request["id"], "result": "next"},
            )

        nursery.start_soon(answer_late_then_the_next)
        assert await connection.request("second") == "next"
        assert connection.failure is None


async def test_writing_to_an_agent_that_closed_its_input_fails_the_connection() -> None:
    async with connected(Handler()) as (connection, peer):
        await peer.inbound.aclose()
        with pytest.raises(AgentExitedError, match="closed its input"):
            await connection.request("initialize", {})
