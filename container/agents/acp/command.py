"""How to start an agent given by its raw ``command`` (no preset).

:func:`prepare` has the presets' interface; a preset agent needs the presets module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sandstream.core.schemas import AcpAgent

from ...errors import ConfigError

__all__ = ["PreparedAgent", "prepare"]


@dataclass(frozen=True)
class PreparedAgent:
    """How to start an ACP agent: ``command``, its whole ``env``, the session ``mode``
    to set after ``session/new`` (``None``: leave the agent's), and text chunks to drop."""

    command: list[str]
    env: dict[str, str]
    mode: str | None = None
    hidden_text: tuple[str, ...] = ()


def prepare(
    spec: AcpAgent,
    *,
    env: Mapping[str, str],
    home: Path,
    work_dir: Path,
    model: str | None,
    agents_dir: Path,
) -> PreparedAgent:
    """``spec.command`` with ``env``, ``spec.env`` and ``HOME`` set to ``home``."""
    if spec.command is None:
        raise ConfigError(f"the acp preset {spec.preset!r} is not available here")
    return PreparedAgent(
        command=list(spec.command), env={**env, **spec.env, "HOME": str(home)}, mode=spec.mode
    )
