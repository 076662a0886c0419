"""What the real-agent tests share: the five presets, which of them ask before a command,
and an agent spec pointing a preset at the stand-in model server."""

from __future__ import annotations

from typing import Any, Final, get_args

from benchmarks.support.model_server import ModelServer
from sandstream.core.schemas import AcpAgent, AcpPreset

__all__ = ["ASKING", "PRESETS", "WRITE", "acp_spec"]

PRESETS: Final[tuple[AcpPreset, ...]] = get_args(AcpPreset)
ASKING: Final[tuple[AcpPreset, ...]] = ("claude", "opencode", "gemini")
"""The presets that ask before running a command (Claude Code and Gemini CLI in their
default mode, OpenCode with ``permission.bash = "ask"``)."""
WRITE: Final = "echo hello-from-tool > out.txt && cat out.txt"
"""A command every asking agent asks about (a plain ``echo`` Claude Code allows itself)."""


def acp_spec(preset: AcpPreset, model: ModelServer, **options: Any) -> AcpAgent:
    """``preset`` with every provider setting pointing at ``model`` (stall timeout 90 s)."""
    env = model.provider_env(preset)
    return AcpAgent(preset=preset, env=env, **{"stall_timeout_sec": 90, **options})
