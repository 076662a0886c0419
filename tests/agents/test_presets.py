"""The acp presets: the command, environment, mode and config files each agent reads."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from sandstream.container.agents.acp.install import AgentNotInstalledError, prefix_of
from sandstream.container.agents.acp.presets import (
    PreparedAgent,
    ProviderSettingsError,
    prepare,
)
from sandstream.container.agents.acp.shield import shield_path
from sandstream.core.agents_dir import default_agents_dir
from sandstream.core.schemas import AcpAgent, AcpPreset

PROVIDERS = {
    "PATH": "/usr/bin:/bin",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/anthropic",
    "ANTHROPIC_API_KEY": "sk-ant",
    "ANTHROPIC_MODEL": "claude-from-env",
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    "OPENAI_API_KEY": "sk-openai",
    "OPENAI_MODEL": "gpt-from-env",
    "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:9",
    "GEMINI_API_KEY": "gm-key",
    "GEMINI_MODEL": "gemini-from-env",
}


def _prepare(
    preset: AcpPreset,
    tmp_path: Path,
    *,
    env: dict[str, str] = PROVIDERS,
    model: str | None = None,
    **spec: object,
) -> PreparedAgent:
    return prepare(
        AcpAgent(preset=preset, **spec),  # type: ignore[arg-type]
        env=env,
        home=tmp_path / "home",
        work_dir=tmp_path / "work",
        model=model,
        agents_dir=default_agents_dir(),
    )


def _read_json(path: Path) -> object:
    return json.loads(path.read_text())


@pytest.mark.parametrize("preset", ["claude", "codex", "opencode", "gemini", "pi"])
def test_every_preset_runs_the_installed_agent_with_its_home(
    preset: AcpPreset, tmp_path: Path
) -> None:
    prepared = _prepare(preset, tmp_path)
    assert Path(prepared.command[0]).is_file()
    assert Path(prepared.command[0]).is_relative_to(prefix_of(preset, default_agents_dir()))
    home = tmp_path / "home"
    assert prepared.env["HOME"] == str(home)
    assert prepared.env["XDG_CONFIG_HOME"] == str(home / ".config")
    assert prepared.env["XDG_DATA_HOME"] == str(home / ".local" / "share")
    assert prepared.env["XDG_CACHE_HOME"] == str(home / ".cache")
    assert prepared.env["OPENAI_API_KEY"] == "sk-openai"  # the container's env carries on
    # the shield is preloaded, first, whatever the spec preloads
    assert prepared.env["LD_PRELOAD"] == str(shield_path(default_agents_dir()))
    spec_preload = _prepare(preset, tmp_path, env={"LD_PRELOAD": "/x.so"} | PROVIDERS)
    assert spec_preload.env["LD_PRELOAD"] == f"{shield_path(default_agents_dir())} /x.so"


def test_claude(tmp_path: Path) -> None:
    prepared = _prepare("claude", tmp_path)
    assert prepared.command[-1].endswith("claude-agent-acp")
    assert prepared.env["IS_SANDBOX"] == "1"
    assert prepared.env["DISABLE_AUTOUPDATER"] == "1"
    assert prepared.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert prepared.env["ANTHROPIC_MODEL"] == "claude-from-env"
    assert prepared.mode is None
    chosen = _prepare("claude", tmp_path, model="claude-chosen", env={**PROVIDERS}, mode="plan")
    assert chosen.env["ANTHROPIC_MODEL"] == "claude-chosen"
    assert chosen.mode == "plan"


def test_codex_config_toml(tmp_path: Path) -> None:
    prepared = _prepare("codex", tmp_path, model="gpt-chosen")
    codex_home = tmp_path / "home" / ".codex"
    assert prepared.env["CODEX_HOME"] == str(codex_home)
    config = tomllib.loads((codex_home / "config.toml").read_text())
    assert config["check_for_update_on_startup"] is False
    assert config["model_provider"] == "local"
    assert config["model"] == "gpt-chosen"
    assert config["model_providers"]["local"] == {
        "name": "local",
        "base_url": "http://127.0.0.1:9/v1",
        "env_key": "OPENAI_API_KEY",
        "wire_api": "responses",
    }
    assert config["projects"][str(tmp_path / "work")] == {"trust_level": "trusted"}
    assert "sk-openai" not in (codex_home / "config.toml").read_text()
    # codex's helpers need CODEX_HOME outside the temp dir
    assert not codex_home.is_relative_to(prepared.env["TMPDIR"])
    assert Path(prepared.env["TMPDIR"]).is_dir()
    assert prepared.mode == "full-access"
    assert _prepare("codex", tmp_path, mode="auto").mode == "auto"


def test_opencode_json(tmp_path: Path) -> None:
    prepared = _prepare("opencode", tmp_path)
    assert prepared.command[-1] == "acp"
    config = _read_json(tmp_path / "home" / ".config" / "opencode" / "opencode.json")
    assert config == {
        "$schema": "https://opencode.ai/config.json",
        "model": "local/gpt-from-env",
        "enabled_providers": ["local"],
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "local": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "local",
                "options": {"baseURL": "http://127.0.0.1:9/v1", "apiKey": "sk-openai"},
                "models": {"gpt-from-env": {}},
            }
        },
        "permission": {"bash": "ask"},
    }
    assert prepared.env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"
    assert prepared.env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"


def test_gemini_settings(tmp_path: Path) -> None:
    prepared = _prepare("gemini", tmp_path, model="gemini-chosen")
    assert prepared.command[-1] == "--acp"
    settings = _read_json(tmp_path / "home" / ".gemini" / "settings.json")
    assert settings == {
        "general": {
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            "sessionRetention": {"enabled": False},
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "model": {"name": "gemini-chosen"},
    }
    assert prepared.env["GEMINI_MODEL"] == "gemini-chosen"  # Gemini CLI's own wins over settings
    assert prepared.env["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    assert prepared.env["GEMINI_CLI_NO_RELAUNCH"] == "true"
    assert prepared.env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9"
    assert prepared.hidden_text == ("[MODE_UPDATE]",)


def test_pi_models_and_settings(tmp_path: Path) -> None:
    prepared = _prepare("pi", tmp_path)
    agent_dir = tmp_path / "home" / ".pi" / "agent"
    assert _read_json(agent_dir / "models.json") == {
        "providers": {
            "local": {
                "baseUrl": "http://127.0.0.1:9/v1",
                "api": "openai-completions",
                "apiKey": "$OPENAI_API_KEY",
                "models": [{"id": "gpt-from-env"}],
            }
        }
    }
    settings = _read_json(agent_dir / "settings.json")
    assert settings == {
        "defaultProvider": "local",
        "defaultModel": "gpt-from-env",
        "enableInstallTelemetry": False,
        "quietStartup": True,
    }
    bin_dir = prefix_of("pi", default_agents_dir()) / "node_modules" / ".bin"
    assert prepared.env["PATH"] == f"{bin_dir}:/usr/bin:/bin"
    assert prepared.command[0] == str(bin_dir / "node")
    assert prepared.env["PI_OFFLINE"] == "1"
    assert prepared.env["NPM_CONFIG_OFFLINE"] == "true"  # no update notice in the text


@pytest.mark.parametrize(
    ("preset", "missing"),
    [
        ("claude", "ANTHROPIC_API_KEY"),
        ("codex", "OPENAI_API_KEY"),
        ("opencode", "OPENAI_MODEL"),
        ("gemini", "GEMINI_API_KEY"),
        ("pi", "OPENAI_MODEL"),
    ],
)
def test_a_missing_provider_setting_is_named(
    preset: AcpPreset, missing: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in PROVIDERS.items() if k != missing}
    with pytest.raises(ProviderSettingsError, match=missing) as caught:
        _prepare(preset, tmp_path, env=env)
    assert caught.value.code == "bad_config"


def test_provider_settings_may_come_from_the_spec_env(tmp_path: Path) -> None:
    env = {k: v for k, v in PROVIDERS.items() if k != "GEMINI_API_KEY"}
    prepared = prepare(
        AcpAgent(preset="gemini", env={"GEMINI_API_KEY": "from-spec"}),
        env=env,
        home=tmp_path / "home",
        work_dir=tmp_path / "work",
        model=None,
        agents_dir=default_agents_dir(),
    )
    assert prepared.env["GEMINI_API_KEY"] == "from-spec"


def test_a_raw_command(tmp_path: Path) -> None:
    prepared = prepare(
        AcpAgent(command=["my-agent", "--acp"], env={"X": "1"}, mode="yolo"),
        env={"PATH": "/bin"},
        home=tmp_path / "home",
        work_dir=tmp_path / "work",
        model="m",
        agents_dir=tmp_path / "nothing-installed",
    )
    assert prepared.command == ["my-agent", "--acp"]
    assert prepared.env["X"] == "1"
    assert prepared.env["HOME"] == str(tmp_path / "home")
    assert prepared.mode == "yolo"
    assert prepared.hidden_text == ()
    assert "LD_PRELOAD" not in prepared.env  # no shield built there


def test_a_raw_command_gets_the_shield_where_it_is_built(tmp_path: Path) -> None:
    prepared = prepare(
        AcpAgent(command=["my-agent"]),
        env={"PATH": "/bin"},
        home=tmp_path / "home",
        work_dir=tmp_path / "work",
        model=None,
        agents_dir=default_agents_dir(),
    )
    assert prepared.env["LD_PRELOAD"] == str(shield_path(default_agents_dir()))


def test_a_preset_not_installed(tmp_path: Path) -> None:
    with pytest.raises(AgentNotInstalledError, match="sandstream agents install pi"):
        prepare(
            AcpAgent(preset="pi"),
            env=PROVIDERS,
            home=tmp_path / "home",
            work_dir=tmp_path / "work",
            model=None,
            agents_dir=tmp_path / "nothing-installed",
        )


def test_gemini_s_saved_sessions_are_renamed_before_it_starts(tmp_path: Path) -> None:
    chats = tmp_path / "home" / ".gemini" / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    (chats / "session-2026-12-02T05-51-4b362968.jsonl").write_text("{}\n")
    _prepare("gemini", tmp_path)
    assert [p.name for p in chats.iterdir()] == ["session-2026-12-02T05-51-kept-4b362968.jsonl"]


@pytest.mark.parametrize(
    ("preset", "from_env"),
    [
        ("claude", "claude-from-env"),
        ("codex", "gpt-from-env"),
        ("opencode", "gpt-from-env"),
        ("gemini", "gemini-from-env"),
        ("pi", "gpt-from-env"),
    ],
)
def test_the_model_each_preset_sets_up_is_known_to_set_again(
    preset: AcpPreset, from_env: str, tmp_path: Path
) -> None:
    """The config's model, else the provider settings': the one a continued session
    gets again."""
    assert _prepare(preset, tmp_path / "a").model == from_env
    assert _prepare(preset, tmp_path / "b", model="chosen").model == "chosen"


def test_a_command_of_the_spec_s_own_sets_up_no_model(tmp_path: Path) -> None:
    prepared = prepare(
        AcpAgent(command=["my-agent", "--acp"]),
        env=PROVIDERS,
        home=tmp_path / "home",
        work_dir=tmp_path / "work",
        model="chosen",
        agents_dir=default_agents_dir(),
    )
    assert prepared.model is None
