"""The model providers the agents call, in one table: each one's variables, its API's
default base URL, and the prefix it has on a runner's model gateway.

The chat backend takes these variables out of what it serves a sandbox
(:func:`split_provider_vars`) and hands them to the runner in the dispatch; the runner's
gateway holds the keys, and the container points each provider's variables at the
gateway (:func:`gateway_env`). Pure functions; bad input does not arise (any mapping of
strings is read as it is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "PROVIDERS",
    "PROVIDER_VARS",
    "Provider",
    "gateway_env",
    "provider_by_name",
    "provider_vars",
    "split_provider_vars",
]


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider: ``name`` (also its gateway prefix, ``/{name}``), the variables
    that hold its key (``key_vars``: the first that is set counts), the one that holds
    its base URL, and the base URL when none is set (what the clients append their API
    paths to: ``/v1/messages`` for Anthropic, ``/chat/completions`` for OpenAI,
    ``/v1beta/models/...`` for Gemini)."""

    name: str
    key_vars: tuple[str, ...]
    base_url_var: str
    default_base_url: str

    @property
    def variables(self) -> tuple[str, ...]:
        """Its key variables and its base URL variable."""
        return (*self.key_vars, self.base_url_var)

    def key(self, env: Mapping[str, str]) -> str | None:
        """Its key in ``env`` (the first key variable set), or ``None``."""
        return next((env[name] for name in self.key_vars if env.get(name)), None)

    def base_url(self, env: Mapping[str, str]) -> str:
        """Its base URL in ``env`` (no trailing ``/``), or the default."""
        return (env.get(self.base_url_var) or self.default_base_url).rstrip("/")


PROVIDERS: Final[tuple[Provider, ...]] = (
    Provider(
        "anthropic", ("ANTHROPIC_API_KEY",), "ANTHROPIC_BASE_URL", "https://api.anthropic.com"
    ),
    Provider("openai", ("OPENAI_API_KEY",), "OPENAI_BASE_URL", "https://api.openai.com/v1"),
    Provider(
        "gemini",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        "GOOGLE_GEMINI_BASE_URL",
        "https://generativelanguage.googleapis.com",
    ),
)
PROVIDER_VARS: Final[frozenset[str]] = frozenset(
    name for provider in PROVIDERS for name in provider.variables
)
"""Every provider variable: the keys and base URLs, never served to a sandbox."""


def provider_by_name(name: str) -> Provider | None:
    """The provider called ``name``, or ``None``."""
    return next((p for p in PROVIDERS if p.name == name), None)


def provider_vars(*sources: Mapping[str, str]) -> dict[str, str]:
    """The provider variables of ``sources``, later ones winning."""
    found: dict[str, str] = {}
    for source in sources:
        found.update((k, v) for k, v in source.items() if k in PROVIDER_VARS)
    return found


def split_provider_vars(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` without its provider variables, and those variables."""
    rest = {k: v for k, v in env.items() if k not in PROVIDER_VARS}
    return rest, provider_vars(env)


def gateway_env(url: str, credential: str, providers: Iterable[str]) -> dict[str, str]:
    """What a sandbox's agent is given for each of ``providers`` served by the gateway
    at ``url``: every key variable set to ``credential``, the base URL variable to the
    provider's prefix on the gateway."""
    env: dict[str, str] = {}
    base = url.rstrip("/")
    for provider in PROVIDERS:
        if provider.name in providers:
            env.update(dict.fromkeys(provider.key_vars, credential))
            env[provider.base_url_var] = f"{base}/{provider.name}"
    return env
