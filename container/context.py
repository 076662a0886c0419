"""What an agent gets to run a turn: config, prompt, environment, dirs and tools."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sandstream.core import LIVE_EXTENSION, ChatTurn, ConfigResponse, Dispatch, PermissionGrant

from .http import HttpSettings
from .inbox import Inbox
from .output import Emitter
from .procs import KILL_GRACE
from .tools import Toolbox

__all__ = ["RunContext"]


@dataclass
class RunContext:
    """One turn's inputs. ``env`` is the full environment for subprocesses;
    ``home_dir`` the agent's home (saved with the work dir for the chat's next turn),
    ``unsaved``: files in either that the container writes anew every turn (never saved).

    ``prompt`` and ``conversation`` come from ``/config`` when it sets them, else from
    the dispatch. ``inbox`` holds user messages sent during the run: an agent takes
    them (:meth:`take_messages`) before each model call.
    """

    dispatch: Dispatch
    config: ConfigResponse
    env: dict[str, str]
    work_dir: Path
    output_dir: Path
    state_dir: Path
    home_dir: Path
    emitter: Emitter
    toolbox: Toolbox
    http: HttpSettings
    kill_grace: float = KILL_GRACE
    inbox: Inbox = field(default_factory=Inbox)
    unsaved: set[Path] = field(default_factory=set)

    @property
    def live(self) -> bool:
        """Whether the reader asked for the ``live`` extension: the agent may emit
        ``delta`` and ``permission`` lines, and ask the user (:meth:`Inbox.ask`)."""
        return LIVE_EXTENSION in self.dispatch.extensions

    @property
    def prompt(self) -> str:
        return self.config.prompt if self.config.prompt is not None else self.dispatch.prompt

    @property
    def conversation(self) -> list[ChatTurn]:
        if self.config.conversation is not None:
            return self.config.conversation
        return self.dispatch.conversation or []

    def granted(self, tool_kind: str, title: str | None) -> bool:
        """Whether one of the chat's grants (``/config``'s ``grants``) answers a request
        about a tool call of ``tool_kind`` titled exactly ``title`` (never an untitled one)."""
        return title is not None and PermissionGrant(tool_kind, title) in self.config.grants

    def take_messages(self) -> list[str]:
        """The user messages received since the last call, each logged as taken."""
        taken = self.inbox.take()
        for text in taken:
            self.emitter.log("info", f"user message: {text}")
        return taken
