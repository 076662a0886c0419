"""The RESP2 client: the sans-IO parser under every chunking, its refusals, and the
trio client against a real redis-server."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.support.redis_server import open_redis_server
from sandstream.server.chat.errors import RedisConnectionError, RedisReplyError, RespProtocolError
from sandstream.server.chat.mover.resp import (
    NEED_DATA,
    ErrorReply,
    RedisClient,
    Reply,
    RespParser,
    encode_command,
    parse_redis_url,
)
from tests.chat.mover_harness import redis_url  # noqa: F401 (a fixture)


def encode_reply(reply: Reply) -> bytes:
    """What a server sends for ``reply`` (the test's own encoder)."""
    if reply is None:
        return b"$-1\r\n"
    if isinstance(reply, ErrorReply):
        return b"-" + reply.message.encode() + b"\r\n"
    if isinstance(reply, str):
        return b"+" + reply.encode() + b"\r\n"
    if isinstance(reply, bool):
        raise TypeError(reply)
    if isinstance(reply, int):
        return b":%d\r\n" % reply
    if isinstance(reply, bytes):
        return b"$%d\r\n%s\r\n" % (len(reply), reply)
    return b"*%d\r\n" % len(reply) + b"".join(encode_reply(item) for item in reply)


line_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=30
)
replies: st.SearchStrategy[Reply] = st.recursive(
    st.none()
    | line_text
    | line_text.map(ErrorReply)
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=5),
    max_leaves=20,
)


def parse_all(parser: RespParser, pieces: list[bytes]) -> list[Reply]:
    out: list[Reply] = []
    for piece in pieces:
        parser.receive_data(piece)
        while (reply := parser.next_reply()) is not NEED_DATA:
            out.append(reply)  # type: ignore[arg-type]
    return out


@given(st.lists(replies, max_size=8), st.data())
def test_every_chunking_of_a_reply_stream_parses_the_same(
    sent: list[Reply], data: st.DataObject
) -> None:
    stream = b"".join(encode_reply(reply) for reply in sent)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=len(stream) + 1)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert parse_all(RespParser(), pieces) == sent
    assert parse_all(RespParser(), [stream[i : i + 1] for i in range(len(stream))]) == sent


@given(st.lists(st.one_of(st.binary(max_size=20), st.text(max_size=10), st.integers()), min_size=1))
def test_a_command_is_an_array_of_bulk_strings(args: list[bytes | str | int]) -> None:
    parser = RespParser()
    parser.receive_data(encode_command(*args))
    expected = [
        a if isinstance(a, bytes) else a.encode() if isinstance(a, str) else b"%d" % a for a in args
    ]
    assert parser.next_reply() == expected
    assert parser.next_reply() is NEED_DATA


@pytest.mark.parametrize(
    "stream",
    [
        b"?what\r\n",
        b"+OK\n",
        b":12x\r\n",
        b":\r\n",
        b"$5\r\nhello!!\r\n",
        b"$-2\r\n",
        b"*-3\r\n",
        b"\r\n",
        b"+\xff\xfe\r\n",
        b"*1\r\n" * 40 + b":1\r\n",
    ],
)
def test_bytes_that_are_not_resp_are_refused(stream: bytes) -> None:
    parser = RespParser()
    parser.receive_data(stream)
    with pytest.raises(RespProtocolError):
        parser.next_reply()


def test_the_parser_bounds_lines_and_bulk_strings() -> None:
    parser = RespParser(max_line_bytes=16, max_bulk_bytes=8)
    parser.receive_data(b"+" + b"a" * 40)
    with pytest.raises(RespProtocolError, match="longer than 16"):
        parser.next_reply()
    parser = RespParser(max_bulk_bytes=8)
    parser.receive_data(b"$9\r\n")
    with pytest.raises(RespProtocolError, match="bulk length of 9"):
        parser.next_reply()


def test_bad_arguments_and_urls_are_refused() -> None:
    with pytest.raises(TypeError):
        encode_command("SET", "k", True)
    with pytest.raises(TypeError):
        encode_command("SET", "k", 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_command()
    for url in ("http://h", "rediss://h:1", "redis://", "redis://h/x", "redis://h:99999"):
        with pytest.raises(ValueError):
            parse_redis_url(url)
    address = parse_redis_url("redis://us%40r:p%3Ass@example:7000/3")
    assert (address.host, address.port, address.db) == ("example", 7000, 3)
    assert (address.username, address.password) == ("us@r", "p:ss")


async def test_the_client_talks_to_a_real_redis(redis_url: str) -> None:  # noqa: F811
    async with RedisClient(redis_url) as redis:
        assert await redis.execute("PING") == "PONG"
        value = bytes(range(256)) * 300  # binary, and larger than one read
        assert await redis.execute("SET", "k", value) == "OK"
        assert await redis.execute("GET", "k") == value
        assert await redis.execute("GET", "missing") is None
        assert await redis.execute("INCR", "n") == 1
        assert await redis.execute("EVAL", "return {1, 'a', false}", 0) == [1, b"a", None]
        with pytest.raises(RedisReplyError) as refused:
            await redis.execute("INCR", "k")
        assert refused.value.kind == "ERR"
        assert await redis.execute("INCR", "n") == 2  # the connection is still good


async def test_a_cancelled_command_drops_the_connection_and_the_next_one_works(
    redis_url: str,  # noqa: F811
) -> None:
    async with RedisClient(redis_url) as redis:
        await redis.execute("SET", "k", "v")
        with trio.move_on_after(0.05):
            await redis.execute("BLPOP", "never", 5)  # blocks in the server
        assert await redis.execute("GET", "k") == b"v"  # not BLPOP's late reply


async def test_a_server_that_goes_away_is_a_connection_error() -> None:
    async with open_redis_server() as server:
        redis = RedisClient(server.url, connect_timeout=2)
        assert await redis.execute("PING") == "PONG"
    with pytest.raises(RedisConnectionError):
        await redis.execute("PING")
    await redis.aclose()
    with pytest.raises(RedisConnectionError, match="closed"):
        await redis.execute("PING")


async def test_the_client_logs_in_and_selects_the_database_the_url_names() -> None:
    async with open_redis_server("--requirepass", "s3:cret") as server:
        base = f"127.0.0.1:{server.port}"
        async with RedisClient(f"redis://:s3%3Acret@{base}/2") as redis:
            await redis.execute("SET", "k", "in db 2")
        async with RedisClient(f"redis://default:s3%3Acret@{base}/0") as redis:
            assert await redis.execute("GET", "k") is None
            await redis.execute("SELECT", 2)
            assert await redis.execute("GET", "k") == b"in db 2"
        for url in (f"redis://:wrong@{base}/0", f"redis://{base}/0"):
            async with RedisClient(url) as redis:
                with pytest.raises(
                    (RedisConnectionError, RedisReplyError), match=r"WRONGPASS|NOAUTH"
                ):
                    await redis.execute("GET", "k")
