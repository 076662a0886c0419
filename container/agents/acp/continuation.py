"""Which session of its own an agent goes on with: the chat's last turn's, or a new one.

The agent's ACP session id is kept in its home (:data:`SESSION_FILE`, saved with the
home for the chat's next turn; never logged or streamed), with the agent's name, so a
chat that changes agents starts the new one afresh. The next turn tries the rungs
:func:`rungs` gives, in order: ``session/resume`` if the agent advertises it,
``session/load`` if it advertises that (the history it replays is not the turn's: the
caller drops it), else ``session/new`` with the conversation so far as a text preamble.

Some agents write their session to disk after they answered the prompt (Claude Code
appends the turn's last messages to its transcript a moment later):
:func:`wait_until_written` waits, boundedly, until nothing in the agent's home has
changed for a while, before the agent is ended and its home saved.

Bad input: a session file that is not this module's (unreadable, malformed, another
agent's) is no session: the turn starts a new one. Nothing here talks to the agent.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Final, Literal

import msgspec
import trio
from acp.schema import InitializeResponse

__all__ = [
    "SESSION_FILE",
    "Rung",
    "read_session",
    "remember_session",
    "rungs",
    "wait_until_written",
]

SESSION_FILE: Final = Path(".sandstream") / "acp-session.json"
"""Where, under the agent's home, its session id is kept."""

Rung = Literal["resume", "load", "new"]
"""How a turn opened the agent's session."""

METHODS: Final[dict[Rung, str]] = {
    "resume": "session/resume",
    "load": "session/load",
    "new": "session/new",
}


class _Kept(msgspec.Struct, frozen=True):
    agent: str
    session_id: str


def read_session(home: Path, agent: str) -> str | None:
    """The session id ``agent`` left in ``home``, if any."""
    try:
        kept = msgspec.json.decode((home / SESSION_FILE).read_bytes(), type=_Kept)
    except (OSError, msgspec.DecodeError):
        return None
    return kept.session_id if kept.agent == agent and kept.session_id else None


def remember_session(home: Path, agent: str, session_id: str) -> None:
    """Keep ``agent``'s ``session_id`` in ``home`` (owner-only, replaced whole)."""
    path = home / SESSION_FILE
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(msgspec.json.encode(_Kept(agent, session_id)))
    temp.replace(path)


def rungs(init: InitializeResponse, session_id: str | None) -> list[Rung]:
    """The ways to open the turn's session, best first (always ending with ``new``)."""
    if session_id is None:
        return ["new"]
    capabilities = init.agent_capabilities
    found: list[Rung] = []
    if capabilities is not None:
        sessions = capabilities.session_capabilities
        if sessions is not None and sessions.resume is not None:
            found.append("resume")
        if capabilities.load_session:
            found.append("load")
    return [*found, "new"]


async def wait_until_written(home: Path, *, quiet: float = 0.3, limit: float = 3.0) -> None:
    """Return once no file under ``home`` has changed for ``quiet`` seconds, or after
    ``limit`` seconds whatever happens (the walk in a worker thread)."""
    with trio.move_on_after(limit):
        while True:
            newest = await trio.to_thread.run_sync(_newest_change, home)
            still = quiet - (time.time() - newest)
            if still <= 0:
                return
            await trio.sleep(still)


def _newest_change(root: Path) -> float:
    """The newest modification time (epoch s) of anything under ``root`` (0: none)."""
    newest = 0.0
    for folder, _, names in os.walk(root):
        for name in (".", *names):
            with contextlib.suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(folder, name)).st_mtime)
    return newest
