"""Small pure pieces: the schema validator, schema defaults, URL joining, prompt rendering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from sandstream.container.agents.claude_code import render_prompt
from sandstream.container.bootstrap import workspace_url
from sandstream.container.errors import ConfigError
from sandstream.container.jsonschema_lite import validate
from sandstream.container.skills import BUILTIN_SKILLS_DIR, SkillRegistry
from sandstream.core.schemas import (
    DEFAULT_MAX_RUNTIME_SEC,
    ChatTurn,
    ConfigResponse,
    Dispatch,
    EnvResponse,
    OpenAIAgent,
    ScriptedAgent,
    agent_kind,
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "count": {"type": "integer", "minimum": 0, "maximum": 10},
        "mode": {"enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "ratio": {"type": ["number", "null"]},
    },
    "required": ["path"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("value", "errors"),
    [
        ({"path": "a"}, []),
        ({"path": "a", "count": 3, "mode": "b", "tags": ["x"], "ratio": None}, []),
        ({"path": "a", "count": 2.0, "ratio": 0.5}, []),
        ({}, ["$: missing required property 'path'"]),
        ([], ["$: expected object"]),
        ({"path": ""}, ["$.path: shorter than 1"]),
        ({"path": "a", "count": True}, ["$.count: expected integer"]),
        ({"path": "a", "count": 11}, ["$.count: must be <= 10"]),
        ({"path": "a", "mode": "c"}, ["$.mode: must be one of ['a', 'b']"]),
        (
            {"path": "a", "tags": ["x", 1, "z"]},
            ["$.tags: more than 2 items", "$.tags[1]: expected string"],
        ),
        ({"path": "a", "ratio": "1"}, ["$.ratio: expected number or null"]),
        ({"path": "a", "extra": 1}, ["$: unexpected property 'extra'"]),
    ],
)
def test_validate(value: Any, errors: list[str]) -> None:
    assert validate(value, _SCHEMA) == errors


def test_config_defaults() -> None:
    config = msgspec.json.decode(b"{}", type=ConfigResponse)
    assert config.agent == OpenAIAgent()
    assert agent_kind(config.agent) == "openai"
    assert config.skills is None
    assert config.max_runtime_sec == DEFAULT_MAX_RUNTIME_SEC
    scripted = msgspec.json.decode(b'{"agent": {"kind": "scripted"}}', type=ConfigResponse)
    assert agent_kind(scripted.agent) == "scripted"
    assert isinstance(scripted.agent, ScriptedAgent)
    assert msgspec.json.decode(b"{}", type=EnvResponse) == EnvResponse(vars={}, setup_script="")


def test_dispatch_roundtrip() -> None:
    raw = (
        b'{"agent_url": "https://ws.example/api/sandbox/s1", "otp_setup": "a", "otp_run": "b",'
        b' "otp_upload": "c", "prompt": "hi",'
        b' "conversation": [{"role": "user", "content": "x", "ts": 1}]}'
    )
    dispatch = msgspec.json.decode(raw, type=Dispatch)
    assert dispatch.conversation == [ChatTurn(role="user", content="x", ts=1)]


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("http://h:1", "http://h:1/env"),
        ("http://h:1/", "http://h:1/env"),
        ("https://h/api/sandbox/s1", "https://h/api/sandbox/s1/env"),
        ("https://h/api/sandbox/s1/", "https://h/api/sandbox/s1/env"),
    ],
)
def test_workspace_url_keeps_the_path(base: str, expected: str) -> None:
    assert workspace_url(base, "env") == expected


def test_render_prompt() -> None:
    assert render_prompt("hi", []) == "hi"
    assert render_prompt("now", [ChatTurn(role="assistant", content="before")]) == (
        "Earlier in this conversation:\n\n[assistant]\nbefore\n\n[user]\nnow"
    )


def test_builtin_manifest_loads() -> None:
    registry = SkillRegistry.load([BUILTIN_SKILLS_DIR])
    assert registry.names() == ["list_files", "read_file", "run_shell", "write_file"]
    tool = registry.get("read_file")
    assert tool is not None
    assert tool.as_openai_tool()["function"]["parameters"]["required"] == ["path"]


def test_manifest_naming_a_missing_executable(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(
        '{"skills": [{"name": "ghost", "description": "", "run": "ghost.sh"}]}'
    )
    with pytest.raises(ConfigError, match=r"ghost\.sh does not exist"):
        SkillRegistry.load([tmp_path])


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read skills manifest"):
        SkillRegistry.load([tmp_path])
