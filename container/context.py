"""What an agent gets to run a turn: config, prompt, environment, dirs and tools."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .http import HttpSettings
from .output import Emitter
from .procs import KILL_GRACE
from .schemas import ChatTurn, ConfigResponse, Dispatch
from .tools import Toolbox

__all__ = ["RunContext"]


@dataclass
class RunContext:
    """One turn's inputs. ``env`` is the full environment for subprocesses.

    ``prompt`` and ``conversation`` come from ``/config`` when it sets them, else from
    the dispatch.
    """

    dispatch: Dispatch
    config: ConfigResponse
    env: dict[str, str]
    work_dir: Path
    output_dir: Path
    state_dir: Path
    emitter: Emitter
    toolbox: Toolbox
    http: HttpSettings
    kill_grace: float = KILL_GRACE

    @property
    def prompt(self) -> str:
        return self.config.prompt if self.config.prompt is not None else self.dispatch.prompt

    @property
    def conversation(self) -> list[ChatTurn]:
        if self.config.conversation is not None:
            return self.config.conversation
        return self.dispatch.conversation or []
