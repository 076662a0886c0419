"""The chat's model, set again on a session the agent resumed or loaded.

A resumed or loaded session may come back with the model it was begun with (or the
agent's default), not the one the preset configured for this turn. :func:`model_request`
reads the agent's answer to ``session/resume`` or ``session/load`` and says which
request sets the model again, if one is needed: ``session/set_config_option`` on the
select option of category ``model`` (the ACP way: Claude Code, Codex, OpenCode, pi),
its value the one naming the model (as given, or behind a provider prefix:
``local/<model>``); else ``session/set_model`` when the answer has the older
``models`` state (Gemini CLI).

Bad input: an answer that is not an object, or options of another shape, count as
offering nothing; a model no option names raises :class:`ModelNotOfferedError` (the
caller warns and goes on with the session's model). Nothing here talks to the agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ModelNotOfferedError", "ModelRequest", "model_request"]


class ModelNotOfferedError(Exception):
    """The agent's model option has no value naming the chat's model."""


@dataclass(frozen=True)
class ModelRequest:
    """The request that sets the session's model: ``method`` and its ``params``."""

    method: str
    params: dict[str, Any]


def model_request(answer: Any, session_id: str, model: str) -> ModelRequest | None:
    """The request setting ``model`` on the session ``answer`` opened; ``None`` when the
    session already has it or the agent offers no way to set it."""
    if not isinstance(answer, dict):
        return None
    option = _model_option(answer.get("configOptions"))
    if option is not None:
        value = _naming(model, _values(option["options"]))
        if value is None:
            raise ModelNotOfferedError(f"the agent's models do not include {model!r}")
        if option.get("currentValue") == value:
            return None
        params = {"sessionId": session_id, "configId": option["id"], "value": value}
        return ModelRequest("session/set_config_option", params)
    state = answer.get("models")
    if isinstance(state, dict) and "currentModelId" in state:
        if state["currentModelId"] == model:
            return None
        return ModelRequest("session/set_model", {"sessionId": session_id, "modelId": model})
    return None


def _model_option(options: Any) -> dict[str, Any] | None:
    """The select config option of category ``model``, if the agent offers one."""
    if not isinstance(options, list):
        return None
    for option in options:
        if (
            isinstance(option, dict)
            and option.get("category") == "model"
            and option.get("type") == "select"
            and isinstance(option.get("id"), str)
            and isinstance(option.get("options"), list)
        ):
            return option
    return None


def _values(options: list[Any]) -> list[str]:
    """The values of a select's options, those of its groups' too."""
    values: list[str] = []
    for entry in options:
        if isinstance(entry, dict) and isinstance(entry.get("value"), str):
            values.append(entry["value"])
        elif isinstance(entry, dict) and isinstance(entry.get("options"), list):
            values += _values(entry["options"])
    return values


def _naming(model: str, values: list[str]) -> str | None:
    """The value that names ``model``: itself, else the one value ``<provider>/<model>``."""
    if model in values:
        return model
    prefixed = [value for value in values if value.endswith(f"/{model}")]
    return prefixed[0] if len(prefixed) == 1 else None
