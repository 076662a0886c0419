"""The Redis lease over coredis against a real redis-server: the ``--redis-url`` forms
(a property test of the parser), passwords, TLS with a throwaway CA, a restart that
loses everything, and whatever else Redis is made to hold: no content wedges a claim."""

from __future__ import annotations

import string
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.support.redis_server import TlsFiles, open_redis_server
from sandstream.server.chat import ChatSettings
from sandstream.server.chat.model.errors import (
    ChatConfigError,
    RedisAuthError,
    RedisConnectionError,
    RedisReplyError,
)
from sandstream.server.chat.mover import RedisLease, open_lease
from sandstream.server.chat.mover.lease import redis_keys
from sandstream.server.chat.mover.redis_url import RedisAddress, parse_redis_url
from sandstream.server.chat.store.moved_runs import MovedChunks
from sandstream.server.databases.sqlite import SQLiteDatabase

MAX_INT64 = 2**63 - 1


async def claim_renew_release(lease: RedisLease) -> None:
    """One lease's whole life, checked."""
    generation = await lease.acquire("ses_a", "replica-1", 30)
    assert generation is not None
    assert await lease.acquire("ses_a", "replica-2", 30) is None
    assert await lease.renew("ses_a", "replica-1", generation, 30)
    await lease.release("ses_a", "replica-1", generation)
    assert await lease.acquire("ses_a", "replica-2", 30) == generation + 1


# -- the URL -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("redis://127.0.0.1:6380/2", RedisAddress("127.0.0.1", 6380, 2)),
        ("redis://cache", RedisAddress("cache", 6379, 0)),
        ("redis://:s%40cret@cache/0", RedisAddress("cache", 6379, 0, None, "s@cret")),
        ("redis://mover:pw@cache:7000/1", RedisAddress("cache", 7000, 1, "mover", "pw")),
        ("redis://[::1]:6379", RedisAddress("::1", 6379, 0)),
    ],
)
def test_plain_urls_are_parsed(url: str, address: RedisAddress) -> None:
    assert parse_redis_url(url) == address
    assert "cret" not in str(parse_redis_url(url))


def test_tls_settings_are_taken_from_the_query() -> None:
    address = parse_redis_url(
        "rediss://:pw@cache:6380/0?ssl_ca_certs=/etc/ca.pem&ssl_certfile=/c.pem"
        "&ssl_keyfile=/c.key&ssl_check_hostname=false"
    )
    assert address.tls is not None
    assert (address.tls.ca_certs, address.tls.certfile, address.tls.keyfile) == (
        "/etc/ca.pem",
        "/c.pem",
        "/c.key",
    )
    assert not address.tls.check_hostname
    plain = parse_redis_url("rediss://cache").tls
    assert plain is not None and plain.check_hostname and plain.ca_certs is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://cache:6379", "redis:// or rediss://"),
        ("cache:6379", "redis:// or rediss://"),
        ("redis://", "no host"),
        ("redis://cache/db1", "must be a number"),
        ("redis://cache:notaport", "bad port"),
        ("redis://cache:0", "1-65535"),
        ("redis://cache?ssl_ca_certs=/ca.pem", "need a rediss:// URL"),
        ("rediss://cache?sslcacerts=/ca.pem", "unknown parameter"),
        ("rediss://cache?ssl_ca_certs=/a&ssl_ca_certs=/b", "twice"),
        ("rediss://cache?ssl_ca_certs=", "empty"),
        ("rediss://cache?ssl_cert_reqs=maybe", "required, optional or none"),
        ("rediss://cache?ssl_check_hostname=perhaps", "true or false"),
        ("rediss://cache?ssl_cert_reqs=none", "ssl_check_hostname=false"),
        ("rediss://cache?ssl_certfile=/c.pem", "both ssl_certfile and ssl_keyfile"),
        ("redis://cache#x", "fragment"),
    ],
)
def test_malformed_urls_are_refused_with_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_redis_url(url)


def test_a_malformed_url_or_an_unreadable_ca_is_a_configuration_error(tmp_path: Path) -> None:
    for url, says in [
        ("redis://:secret@cache/x", "must be a number"),
        (f"rediss://cache?ssl_ca_certs={tmp_path}/missing.pem", "missing.pem"),
    ]:
        with pytest.raises(ChatConfigError, match=says) as refused:
            ChatSettings(data_dir=tmp_path, api_token="t", redis_url=url)
        assert "\n" not in str(refused.value) and "secret" not in str(refused.value)


_HOSTS = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,2}", fullmatch=True)
_SECRETS = st.text(string.printable, max_size=20)


@given(
    host=_HOSTS,
    port=st.integers(1, 65535),
    db=st.integers(0, 1000),
    user=st.none() | st.text(string.ascii_letters + string.digits, min_size=1, max_size=10),
    password=st.none() | _SECRETS,
)
def test_any_url_built_from_its_parts_parses_back_to_them(
    host: str, port: int, db: int, user: str | None, password: str | None
) -> None:
    credentials = ""
    if password is not None:
        credentials = f"{user or ''}:{quote(password, safe='')}@"
    url = f"redis://{credentials}{host}:{port}/{db}"
    expected_user = user if password is not None else None
    assert parse_redis_url(url) == RedisAddress(host, port, db, expected_user, password)


@given(st.text(max_size=80))
def test_any_text_parses_or_is_refused_with_a_value_error(text: str) -> None:
    for url in (text, "redis://" + text, "rediss://cache?" + text):
        try:
            address = parse_redis_url(url)
        except ValueError as exc:
            assert str(exc) and "\n" not in str(exc)
        else:
            assert address.host and 1 <= address.port <= 65535 and address.db >= 0


# -- passwords ---------------------------------------------------------------------------


async def test_a_lease_logs_in_with_the_urls_password(db: SQLiteDatabase) -> None:
    async with open_redis_server("--requirepass", "s3cret/:@") as server:
        url = server.url.replace("redis://", f"redis://:{quote('s3cret/:@', safe='')}@")
        async with open_lease(url, db) as lease:
            assert isinstance(lease, RedisLease)
            await claim_renew_release(lease)


async def test_a_wrong_or_missing_password_is_a_clear_error(db: SQLiteDatabase) -> None:
    async with open_redis_server("--requirepass", "s3cret") as server:
        wrong = server.url.replace("redis://", "redis://:guess@")
        async with open_lease(wrong, db) as lease:
            with pytest.raises(RedisAuthError, match="refused the Redis URL's user or password"):
                await lease.acquire("ses_a", "replica-1", 30)
        async with open_lease(server.url, db) as lease:
            with pytest.raises(RedisAuthError, match="requires a password"):
                await lease.acquire("ses_a", "replica-1", 30)


LEASE_ACL = (
    "~sandbox:*", "resetchannels", "-@all", "+hello", "+ping", "+select", "+evalsha",
    "+script|load", "+type", "+get", "+set", "+pttl", "+pexpire", "+del",
)  # fmt: skip
"""The least an ACL user needs for the lease (docs/chat.md shows it)."""


async def test_an_acl_user_with_the_leases_rights_only_logs_in_with_its_name(
    db: SQLiteDatabase,
) -> None:
    async with open_redis_server("--user", "mover", "on", ">pw", *LEASE_ACL) as server:
        url = server.url.replace("redis://", "redis://mover:pw@")
        async with open_lease(url, db) as lease:
            assert isinstance(lease, RedisLease)
            await claim_renew_release(lease)
        wrong = server.url.replace("redis://", "redis://mover:nope@")
        async with open_lease(wrong, db) as lease:
            with pytest.raises(RedisAuthError):
                await lease.acquire("ses_a", "replica-1", 30)


# -- TLS ---------------------------------------------------------------------------------


async def test_a_lease_over_tls_verifies_the_server_with_the_given_ca(
    db: SQLiteDatabase, tls_files: TlsFiles
) -> None:
    async with open_redis_server(tls=tls_files) as server:
        assert server.url.startswith("rediss://")
        async with open_lease(server.url, db) as lease:
            assert isinstance(lease, RedisLease)
            await claim_renew_release(lease)
        # Without the CA the server's certificate is not trusted: no connection.
        untrusted = server.url.split("?")[0]
        async with open_lease(untrusted, db) as lease:
            with pytest.raises(RedisConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
                await lease.acquire("ses_b", "replica-1", 30)
        # Nor is a certificate for another host name.
        async with open_lease(server.url.replace("127.0.0.1", "localhost"), db) as lease:
            with pytest.raises(RedisConnectionError, match="Hostname mismatch"):
                await lease.acquire("ses_b", "replica-1", 30)
        # Plain RESP to a TLS port gets nowhere either.
        async with open_lease(untrusted.replace("rediss://", "redis://"), db) as lease:
            with pytest.raises(RedisConnectionError):
                await lease.acquire("ses_b", "replica-1", 30)


async def test_a_client_certificate_is_passed_through(
    db: SQLiteDatabase, tls_files: TlsFiles
) -> None:
    async with open_redis_server("--tls-auth-clients", "yes", tls=tls_files) as server:
        with_cert = (
            f"{server.url}&ssl_certfile={quote(str(tls_files.client_cert))}"
            f"&ssl_keyfile={quote(str(tls_files.client_key))}"
        )
        async with open_lease(with_cert, db) as lease:
            assert isinstance(lease, RedisLease)
            await claim_renew_release(lease)
        async with open_lease(server.url, db) as lease:  # the server requires one
            with pytest.raises(RedisConnectionError):
                await lease.acquire("ses_b", "replica-1", 30)


# -- what Redis may hold -----------------------------------------------------------------


@pytest.fixture
async def redis_lease(db: SQLiteDatabase) -> AsyncIterator[RedisLease]:
    async with open_redis_server() as server, open_lease(server.url, db) as lease:
        assert isinstance(lease, RedisLease)
        yield lease


async def test_a_redis_that_lost_everything_still_hands_out_generations_above_the_fence(
    db: SQLiteDatabase,
) -> None:
    sink = MovedChunks(db)
    async with open_redis_server() as server, open_lease(server.url, db) as lease:
        assert isinstance(lease, RedisLease)
        old = await lease.acquire("ses_a", "replica-1", 30)
        assert old == 1
        await sink.fence("ses_a", 7)  # say an earlier Redis had handed out up to 7
        await server.restart()  # nothing persisted: both keys are gone
        assert await lease.redis.exists(redis_keys("ses_a")) == 0
        assert not await lease.renew("ses_a", "replica-1", old, 30)
        new = await lease.acquire("ses_a", "replica-2", 30)
        assert new == 8
        await sink.fence("ses_a", new)  # accepted: no FencedError
        assert await lease.renew("ses_a", "replica-2", new, 30)


async def write_counter(lease: RedisLease, kind: str) -> None:
    counter = redis_keys("ses_a")[1]
    await lease.redis.delete([counter])
    if kind == "max":
        await lease.redis.set(counter, str(MAX_INT64))
    elif kind == "garbage":
        await lease.redis.set(counter, "\x00not a number")
    elif kind == "negative":
        await lease.redis.set(counter, "-5")
    elif kind == "float":
        await lease.redis.set(counter, "3.5")
    elif kind == "list":
        await lease.redis.rpush(counter, ["1"])
    elif kind == "hash":
        await lease.redis.hset(counter, {"generation": "1"})


@pytest.mark.parametrize("kind", ["max", "garbage", "negative", "float", "list", "hash"])
async def test_a_tampered_counter_counts_as_the_fence(
    db: SQLiteDatabase, redis_lease: RedisLease, kind: str
) -> None:
    sink = MovedChunks(db)
    generation = await redis_lease.acquire("ses_a", "replica-1", 30)
    assert generation is not None
    await sink.fence("ses_a", generation)
    await write_counter(redis_lease, kind)
    # The holder's renewals fail (the counter is not its generation any more) ...
    assert not await redis_lease.renew("ses_a", "replica-1", generation, 30)
    await redis_lease.release("ses_a", "replica-1", generation)  # does nothing
    # ... and once its owner key is gone too, the next claim is above the fence.
    await redis_lease.redis.delete([redis_keys("ses_a")[0]])
    new = await redis_lease.acquire("ses_a", "replica-2", 30)
    assert new == generation + 1
    await sink.fence("ses_a", new)
    assert await redis_lease.renew("ses_a", "replica-2", new, 30)


@pytest.mark.parametrize("kind", ["no expiry", "years", "list", "hash"])
async def test_an_owner_key_no_lease_could_have_left_does_not_hold_a_claim_off(
    redis_lease: RedisLease, kind: str
) -> None:
    owner = redis_keys("ses_a")[0]
    if kind == "no expiry":
        await redis_lease.redis.set(owner, "intruder")
    elif kind == "years":
        await redis_lease.redis.set(owner, "intruder", px=10**12)
    elif kind == "list":
        await redis_lease.redis.rpush(owner, ["intruder"])
    else:
        await redis_lease.redis.hset(owner, {"owner": "intruder"})
    generation = await redis_lease.acquire("ses_a", "replica-1", 30)
    assert generation == 1
    assert await redis_lease.redis.get(owner) == b"replica-1"
    assert 0 < await redis_lease.redis.pttl(owner) <= 30_000


async def test_a_live_lease_of_the_same_ttl_still_holds(redis_lease: RedisLease) -> None:
    """A key that could be a lease (a string, expiring within the ttl) holds, even
    when not written by a lease: within the ttl it is gone."""
    await redis_lease.redis.set(redis_keys("ses_a")[0], "someone", px=30_000)
    assert await redis_lease.acquire("ses_a", "replica-1", 30) is None
    await redis_lease.redis.set(redis_keys("ses_a")[0], "someone", px=100)
    with trio.fail_after(10):
        while await redis_lease.acquire("ses_a", "replica-1", 30) is None:
            await trio.sleep(0.02)


async def test_a_generation_the_lease_cannot_use_is_a_failed_claim(
    db: SQLiteDatabase, redis_lease: RedisLease
) -> None:
    """A fence beyond what Lua counts exactly (2^60): the script's answer is not above
    it, and the claim fails with a clear error instead of handing it out."""
    await MovedChunks(db).fence("ses_a", 2**60)
    with pytest.raises(RedisReplyError, match="not a generation above the session's fence"):
        await redis_lease.acquire("ses_a", "replica-1", 30)
