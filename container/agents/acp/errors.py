"""How an ACP turn fails: each :class:`~sandstream.container.errors.ContainerError` here
becomes the run's ``error`` line with its own code."""

from __future__ import annotations

import json
from typing import Any, Final

from ...errors import AgentError

__all__ = [
    "AgentExitedError",
    "AgentStalledError",
    "MaxTokensError",
    "MaxTurnRequestsError",
    "ProtocolError",
    "RefusalError",
    "RemoteError",
]

_DETAIL_CHARS: Final = 500
"""The most characters of a JSON-RPC error's ``data`` its message shows."""


class ProtocolError(AgentError):
    """The agent broke JSON-RPC or ACP: a line that is not JSON, not a JSON-RPC message,
    a response to no request, an update that does not match the schema
    (``agent_protocol_error``)."""

    default_code = "agent_protocol_error"


class RemoteError(AgentError):
    """The agent answered a request with a JSON-RPC error (``agent_error``)."""

    default_code = "agent_error"

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method} failed ({code}): {message}{_detail(data)}")
        self.rpc_code = code
        self.data = data


def _detail(data: Any) -> str:
    """An error's ``data`` as a suffix of its message (JSON unless a string), at most
    :data:`_DETAIL_CHARS` characters of it."""
    if data is None or data == "":
        return ""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    if len(text) > _DETAIL_CHARS:
        text = text[: _DETAIL_CHARS - 1] + "…"
    return f": {text}"


class AgentExitedError(AgentError):
    """The agent closed its output or exited before the turn ended (``agent_exited``)."""

    default_code = "agent_exited"


class AgentStalledError(AgentError):
    """The agent said nothing for ``stall_timeout_sec`` while a prompt ran
    (``agent_stalled``)."""

    default_code = "agent_stalled"


class MaxTokensError(AgentError):
    """The turn stopped at the model's token limit (stop reason ``max_tokens``)."""

    default_code = "max_tokens"


class MaxTurnRequestsError(AgentError):
    """The turn stopped at the agent's limit of model requests (``max_turn_requests``)."""

    default_code = "max_turn_requests"


class RefusalError(AgentError):
    """The model refused to go on (stop reason ``refusal``)."""

    default_code = "refusal"
