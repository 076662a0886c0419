"""The chat's model set again on a continued session: read from the answers the five
agents give (their shapes as they answer ``session/new``, ``session/load`` and
``session/resume``), by the ACP config option of category ``model`` or Gemini CLI's
``models`` state, and only when the session has another."""

from __future__ import annotations

from typing import Any

import pytest

from sandstream.container.agents.acp.model_choice import (
    ModelNotOfferedError,
    ModelRequest,
    model_request,
)

SESSION = "0f7bd9eb-d7c9-455c-a56b-8f58a777f7e3"


def _select(category: str, current: str, values: list[str], id_: str = "model") -> Any:
    options = [{"value": value, "name": value} for value in values]
    return {"id": id_, "name": id_, "category": category, "type": "select",
            "currentValue": current, "options": options}  # fmt: skip


CLAUDE = {
    "models": {"availableModels": [{"modelId": "default", "name": "Default"}],
               "currentModelId": "default"},
    "modes": {"currentModeId": "default", "availableModes": []},
    "configOptions": [
        _select("mode", "default", ["default", "acceptEdits", "plan"], "mode"),
        _select("model", "default", ["default", "sonnet[1m]", "haiku", "claude-haiku-4-5"]),
    ],
}  # fmt: skip
PI = {
    "configOptions": [
        _select("model", "local/test-model", ["anthropic/claude-opus-5", "local/test-model",
                                               "local/other-model"]),
        _select("thought_level", "off", ["off"], "thought_level"),
    ]
}  # fmt: skip
GEMINI = {
    "modes": {"currentModeId": "default", "availableModes": []},
    "models": {"availableModels": [{"modelId": "auto", "name": "Auto"}],
               "currentModelId": "test-model"},
}  # fmt: skip


def test_the_acp_model_option_is_set_to_the_value_naming_the_model() -> None:
    assert model_request(CLAUDE, SESSION, "claude-haiku-4-5") == ModelRequest(
        "session/set_config_option",
        {"sessionId": SESSION, "configId": "model", "value": "claude-haiku-4-5"},
    )


def test_a_value_behind_a_provider_prefix_names_the_model() -> None:
    assert model_request(PI, SESSION, "other-model") == ModelRequest(
        "session/set_config_option",
        {"sessionId": SESSION, "configId": "model", "value": "local/other-model"},
    )


def test_a_session_that_has_the_model_is_left_as_it_is() -> None:
    assert model_request(PI, SESSION, "test-model") is None
    assert model_request(GEMINI, SESSION, "test-model") is None


def test_gemini_s_model_state_is_set_by_session_set_model() -> None:
    assert model_request(GEMINI, SESSION, "gemini-other") == ModelRequest(
        "session/set_model", {"sessionId": SESSION, "modelId": "gemini-other"}
    )


def test_grouped_options_are_searched_too() -> None:
    grouped = _select("model", "a/x", [])
    grouped["options"] = [
        {"group": "a", "name": "A", "options": [{"value": "a/x", "name": "x"}]},
        {"group": "b", "name": "B", "options": [{"value": "b/y", "name": "y"}]},
    ]
    assert model_request({"configOptions": [grouped]}, SESSION, "y") == ModelRequest(
        "session/set_config_option", {"sessionId": SESSION, "configId": "model", "value": "b/y"}
    )


@pytest.mark.parametrize(
    ("values", "model"),
    [(["default", "haiku"], "claude-opus-9"), (["a/m", "b/m"], "m")],
    ids=["not offered", "two providers offer it"],
)
def test_a_model_no_single_option_names_is_refused(values: list[str], model: str) -> None:
    with pytest.raises(ModelNotOfferedError, match=model):
        model_request({"configOptions": [_select("model", values[0], values)]}, SESSION, model)


@pytest.mark.parametrize(
    "answer",
    [
        None,
        [],
        {},
        {"configOptions": "model"},
        {"configOptions": [_select("mode", "plan", ["plan"], "mode")]},
        {"configOptions": [{"category": "model", "type": "boolean", "id": "model"}]},
        {"models": {"availableModels": []}},
    ],
    ids=["null", "a list", "empty", "options not a list", "no model option",
         "a model option not a select", "a model state without its current model"],
)  # fmt: skip
def test_an_answer_offering_no_way_to_set_a_model_asks_nothing(answer: Any) -> None:
    assert model_request(answer, SESSION, "test-model") is None
