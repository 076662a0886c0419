"""protocol_of names the model calls by route; provider_error answers in each provider's
documented error shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core import ModelProtocol, Usage, UsageMeter, protocol_of, provider_error


@pytest.mark.parametrize(
    ("method", "path", "protocol"),
    [
        ("POST", "/v1/messages", "anthropic"),
        ("POST", "/anthropic/v1/messages/", "anthropic"),
        ("POST", "/v1/messages?beta=true", "anthropic"),
        ("POST", "/v1/messages/count_tokens", None),
        ("POST", "/v1/messages/batches", None),
        ("GET", "/v1/models", None),
        ("POST", "/v1/chat/completions", "chat"),
        ("post", "/api/v1/chat/completions", "chat"),
        ("POST", "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", "chat"),
        ("GET", "/v1/chat/completions", None),
        ("POST", "/v1/responses", "responses"),
        ("POST", "/v1/responses/input_tokens", None),
        ("GET", "/v1/responses/resp_123", None),
        ("POST", "/v1/responses/resp_123/cancel", None),
        ("POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", "gemini"),
        ("POST", "/v1beta/models/gemini-2.5-flash:generateContent", "gemini"),
        ("POST", "/v1/projects/p/locations/l/publishers/google/models/m:generateContent", "gemini"),
        ("POST", "/v1beta/models/gemini-2.5-pro:countTokens", None),
        ("POST", "/v1beta/models/text-embedding-004:embedContent", None),
        ("GET", "/v1beta/models", None),
        ("POST", "/", None),
        ("POST", "", None),
    ],
)
def test_protocol_of_a_route(method: str, path: str, protocol: ModelProtocol | None) -> None:
    assert protocol_of(method, path) == protocol


@given(method=st.text(max_size=8), path=st.text(max_size=80))
def test_protocol_of_anything_never_raises(method: str, path: str) -> None:
    assert protocol_of(method, path) in (None, "anthropic", "chat", "responses", "gemini")


ANTHROPIC = {401: "authentication_error", 429: "rate_limit_error", 500: "api_error",
             503: "overloaded_error", 529: "overloaded_error", 400: "invalid_request_error",
             418: "invalid_request_error", 502: "api_error"}  # fmt: skip
OPENAI = {401: ("invalid_request_error", "invalid_api_key"),
          429: ("requests", "rate_limit_exceeded"),
          500: ("server_error", None), 503: ("server_error", None),
          418: ("invalid_request_error", None), 502: ("server_error", None)}  # fmt: skip
GOOGLE = {401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
          400: "INVALID_ARGUMENT", 418: "FAILED_PRECONDITION", 502: "INTERNAL"}  # fmt: skip


def body(protocol: ModelProtocol, status: int, **options: Any) -> Any:
    return json.loads(provider_error(protocol, status, "no budget left — sorry", **options))


@pytest.mark.parametrize(("status", "kind"), ANTHROPIC.items())
def test_anthropic_errors(status: int, kind: str) -> None:
    assert body("anthropic", status) == {
        "type": "error",
        "error": {"type": kind, "message": "no budget left — sorry"},
    }


@pytest.mark.parametrize("protocol", ["chat", "responses"])
@pytest.mark.parametrize(("status", "kind_code"), OPENAI.items())
def test_openai_errors(
    protocol: ModelProtocol, status: int, kind_code: tuple[str, str | None]
) -> None:
    kind, code = kind_code
    assert body(protocol, status) == {
        "error": {"message": "no budget left — sorry", "type": kind, "param": None, "code": code}
    }


def test_a_spent_quota_is_openai_s_insufficient_quota() -> None:
    assert body("chat", 429, quota=True)["error"] | {"message": ""} == {
        "message": "",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
    assert body("anthropic", 429, quota=True) == body("anthropic", 429)
    assert body("gemini", 429, quota=True) == body("gemini", 429)


@pytest.mark.parametrize(("status", "name"), GOOGLE.items())
def test_gemini_errors(status: int, name: str) -> None:
    assert body("gemini", status) == {
        "error": {"code": status, "message": "no budget left — sorry", "status": name}
    }


@pytest.mark.parametrize("protocol", ["anthropic", "chat", "responses", "gemini"])
def test_an_error_body_meters_as_no_usage(protocol: ModelProtocol) -> None:
    meter = UsageMeter(protocol, content_type="application/json")
    meter.feed(provider_error(protocol, 429, "slow down"))
    assert (meter.close(), meter.model, meter.complete) == (Usage(), None, False)
