"""The acp presets: how to start each known agent, with its environment and config files.

:func:`prepare` turns an :class:`~sandstream.core.schemas.AcpAgent` spec into a
:class:`PreparedAgent`: the command (the installed agent's, :mod:`.install`, unless the
spec gives one), the whole environment of the agent process, the ACP session mode to
switch to, and the agent text chunks to drop. It writes the agent's own config files
under ``home`` from the provider settings in the environment (and renames Gemini CLI's
saved session files: :mod:`.gemini_sessions`):

========  =====================================================  ==========================
preset    reads (``*`` required)                                 writes
========  =====================================================  ==========================
claude    ``ANTHROPIC_API_KEY``\\*, ``ANTHROPIC_BASE_URL``,       nothing (the variables
          ``ANTHROPIC_MODEL``                                    are Claude Code's own)
codex     ``OPENAI_API_KEY``\\*, ``OPENAI_BASE_URL``,             ``~/.codex/config.toml``
          ``OPENAI_MODEL``
opencode  ``OPENAI_API_KEY``\\*, ``OPENAI_BASE_URL``,             ``~/.config/opencode/
          ``OPENAI_MODEL``\\*                                     opencode.json``
gemini    ``GEMINI_API_KEY``\\*, ``GOOGLE_GEMINI_BASE_URL``,      ``~/.gemini/settings.json``
          ``GEMINI_MODEL``
pi        ``OPENAI_API_KEY``\\*, ``OPENAI_BASE_URL``,             ``~/.pi/agent/models.json``,
          ``OPENAI_MODEL``\\*                                     ``settings.json``
========  =====================================================  ==========================

The model given to :func:`prepare` (the agent config's) wins over the ``*_MODEL``
variable. The environment is the container's, then ``HOME`` and the XDG dirs under
``home``, then the preset's switches (telemetry and updates off, ``IS_SANDBOX=1`` for
Claude Code), then the spec's ``env`` (which can so override any of them), then the
model the agent config chose, and last the agents' shield first in ``LD_PRELOAD``
(:mod:`.shield`; for a command of the spec's own, when it is built). API keys stay in
the environment; config files refer to them by name where the agent allows it (codex,
pi) and hold them otherwise (opencode).

Bad input: a missing provider setting raises :class:`ProviderSettingsError` naming the
variable; an agent not installed raises :class:`~.install.AgentNotInstalledError`.
Nothing here starts a process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sandstream.core import AcpAgent, AcpPreset

from ...errors import ConfigError
from .gemini_sessions import unpin_sessions
from .install import AGENTS, installed_command, prefix_of
from .shield import shielded

__all__ = ["PreparedAgent", "ProviderSettingsError", "prepare"]

_DEFAULT_OPENAI_URL: Final = "https://api.openai.com/v1"


class ProviderSettingsError(ConfigError):
    """A provider setting the preset needs is missing (``bad_config``)."""


@dataclass(frozen=True)
class PreparedAgent:
    """How to start an ACP agent: ``command``, its whole ``env``, the session ``mode``
    to set after ``session/new`` (``None``: leave the agent's), agent text chunks to
    drop (``hidden_text``: exact chunk texts that are the agent's own markers), the
    config files written for it (``config_files``: written again every turn, so never
    saved with its home; one may hold a provider key), and the ``model`` the preset set
    it up with (the config's, else the provider settings'; ``None``: the agent's own
    choice), to set again on a session it resumes or loads."""

    command: list[str]
    env: dict[str, str]
    mode: str | None = None
    hidden_text: tuple[str, ...] = ()
    config_files: tuple[Path, ...] = ()
    model: str | None = None


@dataclass(frozen=True)
class _Preset:
    """A preset's own part: extra environment (``chosen``: set last, the model the
    agent config chose), default mode, hidden text, the model it set the agent up with."""

    env: dict[str, str]
    mode: str | None = None
    hidden_text: tuple[str, ...] = ()
    chosen: dict[str, str] = field(default_factory=dict)
    model: str | None = None


@dataclass(frozen=True)
class _Where:
    """What a preset reads: the provider settings, the agent's home and work dir, the
    model the agent config chose, and the agent's npm prefix; ``written``: the config
    files it wrote."""

    env: Mapping[str, str]
    home: Path
    work_dir: Path
    model: str | None
    prefix: Path
    written: list[Path] = field(default_factory=list)


def _required(env: Mapping[str, str], name: str, preset: str) -> str:
    value = env.get(name, "")
    if not value:
        raise ProviderSettingsError(
            f"the {preset} agent needs {name} (set it in the named environment or the "
            "agent config's env)"
        )
    return value


def _write(at: _Where, path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    at.written.append(path)


def _write_json(at: _Where, path: Path, value: Any) -> None:
    _write(at, path, json.dumps(value, indent=2) + "\n")


def _toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value)


def _claude(at: _Where) -> _Preset:
    env, model = at.env, at.model
    _required(env, "ANTHROPIC_API_KEY", "claude")
    extra = {
        "IS_SANDBOX": "1",  # lets Claude Code run as root
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    chosen = model or env.get("ANTHROPIC_MODEL")
    return _Preset(extra, chosen={"ANTHROPIC_MODEL": model} if model else {}, model=chosen)


def _codex(at: _Where) -> _Preset:
    env, home, model = at.env, at.home, at.model
    _required(env, "OPENAI_API_KEY", "codex")
    codex_home = home / ".codex"
    lines = [
        "check_for_update_on_startup = false",
        'model_provider = "local"',
    ]
    chosen = model or env.get("OPENAI_MODEL")
    if chosen:
        lines.append(f"model = {_toml_string(chosen)}")
    lines += [
        "",
        "[model_providers.local]",
        'name = "local"',
        f"base_url = {_toml_string(env.get('OPENAI_BASE_URL') or _DEFAULT_OPENAI_URL)}",
        'env_key = "OPENAI_API_KEY"',
        'wire_api = "responses"',
        "",
        f"[projects.{_toml_string(str(at.work_dir))}]",
        'trust_level = "trusted"',
        "",
        "[analytics]",
        "enabled = false",
        "",
    ]
    _write(at, codex_home / "config.toml", "\n".join(lines))
    # Codex puts helper commands on PATH only when CODEX_HOME is outside the temp dir,
    # and a sandbox's home is inside /tmp: its TMPDIR moves beside CODEX_HOME.
    tmp = home / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    # Codex's own sandbox cannot start inside ours: ours is the sandbox.
    own = {"CODEX_HOME": str(codex_home), "TMPDIR": str(tmp)}
    return _Preset(own, mode="full-access", model=chosen)


def _opencode(at: _Where) -> _Preset:
    env, home, model = at.env, at.home, at.model
    key = _required(env, "OPENAI_API_KEY", "opencode")
    chosen = model or _required(env, "OPENAI_MODEL", "opencode")
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": f"local/{chosen}",
        "enabled_providers": ["local"],
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "local": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "local",
                "options": {
                    "baseURL": env.get("OPENAI_BASE_URL") or _DEFAULT_OPENAI_URL,
                    "apiKey": key,
                },
                "models": {chosen: {}},
            }
        },
        "permission": {"bash": "ask"},
    }
    _write_json(at, home / ".config" / "opencode" / "opencode.json", config)
    return _Preset(
        {
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
        },
        model=chosen,
    )


def _gemini(at: _Where) -> _Preset:
    env, home, model = at.env, at.home, at.model
    _required(env, "GEMINI_API_KEY", "gemini")
    settings: dict[str, Any] = {
        "general": {
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            # its start-up cleanup deletes a session a load left a file beside (and any
            # after 30 days): the chat's snapshots keep its sessions as long as they live
            "sessionRetention": {"enabled": False},
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
    }
    chosen = model or env.get("GEMINI_MODEL")
    if chosen:
        settings["model"] = {"name": chosen}
    _write_json(at, home / ".gemini" / "settings.json", settings)
    unpin_sessions(home)  # a restored session, loadable in the minute it began
    return _Preset(
        {"GEMINI_CLI_NO_RELAUNCH": "true", "GEMINI_CLI_TRUST_WORKSPACE": "true"},
        hidden_text=("[MODE_UPDATE]",),
        chosen={"GEMINI_MODEL": model} if model else {},  # it wins over the settings' model
        model=chosen,
    )


def _pi(at: _Where) -> _Preset:
    env, home, model = at.env, at.home, at.model
    _required(env, "OPENAI_API_KEY", "pi")
    chosen = model or _required(env, "OPENAI_MODEL", "pi")
    agent_dir = home / ".pi" / "agent"
    provider = {
        "baseUrl": env.get("OPENAI_BASE_URL") or _DEFAULT_OPENAI_URL,
        "api": "openai-completions",
        "apiKey": "$OPENAI_API_KEY",
        "models": [{"id": chosen}],
    }
    _write_json(at, agent_dir / "models.json", {"providers": {"local": provider}})
    settings = {
        "defaultProvider": "local",
        "defaultModel": chosen,
        "enableInstallTelemetry": False,
        "quietStartup": True,  # no banner as the first prompt's text
    }
    _write_json(at, agent_dir / "settings.json", settings)
    # pi needs a newer node than the system's: the prefix's own, first on PATH.
    path = f"{at.prefix / 'node_modules' / '.bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    # pi-acp asks the registry for a newer pi at each session/new (``npm view``) and
    # says so in the turn's text: npm offline answers nothing, at once.
    offline = {"PI_OFFLINE": "1", "PI_TELEMETRY": "0", "NPM_CONFIG_OFFLINE": "true"}
    return _Preset({**offline, "PATH": path}, model=chosen)


_PRESETS: Final[Mapping[str, Callable[[_Where], _Preset]]] = {
    "claude": _claude,
    "codex": _codex,
    "opencode": _opencode,
    "gemini": _gemini,
    "pi": _pi,
}
assert set(_PRESETS) == set(AGENTS)


def _home_env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }


def prepare(
    spec: AcpAgent,
    *,
    env: Mapping[str, str],
    home: Path,
    work_dir: Path,
    model: str | None,
    agents_dir: Path,
) -> PreparedAgent:
    """How to start ``spec``'s agent in ``work_dir`` with ``home`` as its HOME (config
    files written there); ``env`` is the container's environment for subprocesses."""
    settings = {**env, **spec.env}
    base = {**env, **_home_env(home)}
    if spec.preset is None:
        assert spec.command is not None  # AcpAgent checks it
        environment = shielded({**base, **spec.env}, agents_dir)
        return PreparedAgent(list(spec.command), environment, spec.mode)
    preset: AcpPreset = spec.preset
    command = list(spec.command) if spec.command else installed_command(preset, agents_dir)
    at = _Where(settings, home, work_dir, model, prefix_of(preset, agents_dir))
    own = _PRESETS[preset](at)
    environment = shielded({**base, **own.env, **spec.env, **own.chosen}, agents_dir)
    return PreparedAgent(
        command,
        environment,
        spec.mode or own.mode,
        own.hidden_text,
        tuple(at.written),
        own.model,
    )
