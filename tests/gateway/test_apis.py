"""The provider APIs' rules, sans-IO: which paths are forwarded, how a key is found and
swapped for the real one, which headers go on, each provider's own error bodies."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core import PROVIDERS, provider_by_name
from sandstream.server.gateway.apis import (
    allowed,
    error_body,
    presented_key,
    response_headers,
    route,
    upstream_request,
)


@pytest.mark.parametrize(
    ("method", "target", "forwarded"),
    [
        (b"POST", b"/anthropic/v1/messages?beta=true", True),
        (b"POST", b"/anthropic/v1/messages/count_tokens", True),
        (b"GET", b"/anthropic/v1/models", True),
        (b"POST", b"/anthropic/v1/files", False),
        (b"POST", b"/openai/chat/completions", True),
        (b"POST", b"/openai/responses", True),
        (b"GET", b"/openai/models/gpt-5", True),
        (b"POST", b"/openai/fine_tuning/jobs", False),
        (b"DELETE", b"/openai/models/x", False),
        (b"POST", b"/gemini/v1beta/models/g:streamGenerateContent?alt=sse", True),
        (b"POST", b"/gemini/v1beta/models/g:countTokens", True),
        (b"GET", b"/gemini/v1beta/models", True),
        (b"POST", b"/gemini/v1beta/models/g:embedContent", False),
    ],
)
def test_only_the_agents_calls_are_forwarded(method: bytes, target: bytes, forwarded: bool) -> None:
    found = route(target)
    assert found is not None
    assert allowed(method, found) is forwarded


def test_a_path_of_no_provider_has_no_route() -> None:
    assert route(b"/other/v1/messages") is None and route(b"/") is None


def test_each_provider_swaps_the_key_where_its_client_put_it() -> None:
    anthropic = route(b"/anthropic/v1/messages")
    assert anthropic is not None
    headers = [(b"X-Api-Key", b"cred"), (b"Host", b"gw"), (b"Content-Length", b"2")]
    assert presented_key(anthropic.provider, headers, b"") == "cred"
    url, out = upstream_request(anthropic, headers, "real", "https://api.anthropic.com")
    assert url == "https://api.anthropic.com/v1/messages"
    assert (b"x-api-key", b"real") in out and (b"Content-Length", b"2") in out
    assert all(name.lower() != b"host" and value != b"cred" for name, value in out)

    openai = route(b"/openai/chat/completions")
    assert openai is not None
    bearer = [
        (b"Authorization", b"Bearer cred"),
        (b"Connection", b"keep-alive, x-hop"),
        (b"X-Hop", b"1"),
    ]
    assert presented_key(openai.provider, bearer, b"") == "cred"
    url, out = upstream_request(openai, bearer, "real", "http://local/v1")
    assert url == "http://local/v1/chat/completions"
    assert out == [(b"authorization", b"Bearer real")]

    gemini = route(b"/gemini/v1beta/models/g:generateContent?alt=sse&key=cred")
    assert gemini is not None
    assert presented_key(gemini.provider, [], gemini.query) == "cred"
    url, out = upstream_request(gemini, [], "re al", "https://g")
    assert url == "https://g/v1beta/models/g:generateContent?alt=sse&key=re%20al"
    assert out == []


def test_the_connections_own_headers_never_pass() -> None:
    headers = [
        (b"Transfer-Encoding", b"chunked"),
        (b"Connection", b"close, x-private"),
        (b"x-private", b"1"),
        (b"Keep-Alive", b"5"),
        (b"Content-Length", b"10"),
        (b"content-type", b"text/event-stream"),
    ]
    assert response_headers(headers) == [
        (b"Content-Length", b"10"),
        (b"content-type", b"text/event-stream"),
    ]


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_each_provider_has_its_own_401(provider: object) -> None:
    assert provider in PROVIDERS
    found = provider_by_name(provider.name)
    assert found is not None
    body = msgspec.json.decode(error_body(found, 401, "no"))
    if found.name == "anthropic":
        assert body == {"type": "error", "error": {"type": "authentication_error", "message": "no"}}
    elif found.name == "openai":
        assert body == {
            "error": {"message": "no", "type": "invalid_request_error", "code": "invalid_api_key"}
        }
    else:
        assert body == {"error": {"code": 401, "message": "no", "status": "UNAUTHENTICATED"}}


@given(
    st.binary(max_size=300),
    st.lists(st.tuples(st.binary(max_size=30), st.binary(max_size=30)), max_size=6),
)
def test_any_request_target_and_headers_are_read_without_error(
    target: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    found = route(target)
    if found is None:
        return
    allowed(b"POST", found)
    presented_key(found.provider, headers, found.query)
    url, out = upstream_request(found, headers, "k", found.provider.default_base_url)
    assert url.startswith(found.provider.default_base_url)
    assert all(
        name.lower() not in {b"host", b"connection", b"transfer-encoding"} for name, _ in out
    )
