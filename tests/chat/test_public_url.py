"""The public URL: its checks (a property test of the parser, and ``sandstream serve``'s
start-up refusals through the real CLI) and the probe once the server listens."""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.support.ports import free_port
from sandstream.server.chat.config.public_url import normalize_public_url
from sandstream.server.chat.model.errors import PublicUrlError
from tests.chat.harness import DEADLINE, ServeProcess, start_serve_process


@given(st.text(max_size=80))
def test_a_public_url_is_a_clean_absolute_http_url_or_refused(text: str) -> None:
    try:
        url = normalize_public_url(text)
    except PublicUrlError as exc:
        assert "--public-url" in str(exc)
        return
    parts = urllib.parse.urlsplit(url)
    assert parts.scheme in ("http", "https") and parts.hostname
    assert parts.username is None and parts.password is None
    assert not parts.query and not parts.fragment and not url.endswith("/")
    assert normalize_public_url(url) == url


@given(
    st.sampled_from(["http", "https"]),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z0-9-]{1,10}){0,3}", fullmatch=True),
    st.one_of(st.none(), st.integers(1, 65535)),
    st.from_regex(r"(/[A-Za-z0-9._~-]{1,10}){0,3}/?", fullmatch=True),
)
def test_every_plain_http_base_is_accepted_without_its_trailing_slash(
    scheme: str, host: str, port: int | None, path: str
) -> None:
    url = f"{scheme}://{host}{'' if port is None else f':{port}'}{path}"
    assert normalize_public_url(url) == url.rstrip("/")


@pytest.mark.parametrize(
    "url",
    [
        "sandstream.example.com",
        "/api",
        "ftp://lb.example.com",
        "http://",
        "http://user:secret@lb.example.com",
        "http://lb.example.com/?region=eu",
        "http://lb.example.com/#top",
        "http://lb.example.com:99999",
        "http://lb.example.com/a b",
    ],
)
def test_malformed_public_urls_are_refused(url: str) -> None:
    with pytest.raises(PublicUrlError, match="--public-url"):
        normalize_public_url(url)


async def _serve_refused(tmp_path: Path, *flags: str) -> list[str]:
    """Run ``sandstream serve`` with ``flags``: it must exit 2 before listening; its
    stderr lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDSTREAM_")}
    argv = [str(Path(sys.executable).parent / "sandstream"), "serve", "--port", "0"]
    argv += ["--data-dir", str(tmp_path), *flags]
    with trio.fail_after(DEADLINE):
        result = await trio.run_process(
            argv, capture_stdout=True, capture_stderr=True, env=env, check=False
        )
    assert result.returncode == 2, result
    assert b"listening" not in result.stdout
    lines: list[str] = result.stderr.decode().splitlines()
    return lines


async def test_serve_with_redis_but_no_public_url_is_refused(tmp_path: Path) -> None:
    [line] = await _serve_refused(tmp_path, "--redis-url", "redis://127.0.0.1:6379/0")
    assert line.startswith("sandstream serve: --public-url is required with several replicas")


@pytest.mark.parametrize(
    "url", ["lb.example.com", "http://u:p@lb.example.com", "https://lb.example.com/?a=1"]
)
async def test_serve_with_a_malformed_public_url_is_refused(tmp_path: Path, url: str) -> None:
    [line] = await _serve_refused(tmp_path, "--public-url", url)
    assert line.startswith("sandstream serve: --public-url must")


async def _logged(served: ServeProcess, needle: str) -> dict[str, Any]:
    """The first log record of ``served`` whose message holds ``needle`` (waits for it;
    stderr is not a TTY, so every line is a JSON record)."""
    with trio.fail_after(DEADLINE):
        while not (found := [line for line in served.stderr if needle in line]):
            await trio.sleep(0.05)
    record: dict[str, Any] = json.loads(found[0])
    return record


async def test_serve_warns_when_its_public_url_reaches_no_chat_backend(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/chat"
    served = await start_serve_process(nursery, tmp_path / "data", {}, "--public-url", dead)
    record = await _logged(served, "does not reach a sandstream chat backend")
    assert record["level"] == "warning"
    assert f"{dead}/api/sandbox/healthz" in record["message"]


async def test_serve_finds_its_own_public_url(nursery: trio.Nursery, tmp_path: Path) -> None:
    port = free_port()
    served = await start_serve_process(
        nursery,
        tmp_path / "data",
        {},
        "--port", str(port),
        "--public-url", f"http://127.0.0.1:{port}/",
        "--log-level", "info",
    )  # fmt: skip
    record = await _logged(served, "reaches a sandstream chat backend")
    assert f"the public URL http://127.0.0.1:{port} reaches" in record["message"]
    assert not [line for line in served.stderr if "does not reach" in line]
