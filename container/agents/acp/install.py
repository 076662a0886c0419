"""Install the ACP agents' npm packages at pinned versions, and find them again.

Each agent has one npm prefix per pinned release under the agents dir
(:func:`agents_dir`: ``--dir``, else ``$SANDSTREAM_AGENTS_DIR``, else
``$XDG_CACHE_HOME/sandstream/agents``), named ``NAME-LABEL`` where the label changes
whenever any of its pins does. ``npm install`` runs into a temp dir beside it that is
renamed into place only when complete, under a lock on the agents dir: an interrupted
install leaves no half-done prefix (its temp dir is removed by the next install), and a
re-run with the prefix in place is a no-op. npm's own cache is reused, so a cached
install works offline.

Beside them it builds the agents' shield (:mod:`.shield`), which every agent process
loads. The container calls :func:`installed_command`, which raises
:class:`AgentNotInstalledError` naming the command that installs a missing agent. An
unknown agent name raises :class:`UnknownAgentError`; a failing npm raises
:class:`AgentInstallError` with the tail of its output, a failing build of the shield
:class:`~.shield.ShieldBuildError`.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sandstream.core import AGENTS_DIR_ENV, AcpPreset, default_agents_dir

from ...errors import ConfigError, ContainerError
from .shield import build_shield, shield_path

__all__ = [
    "AGENTS",
    "AGENTS_DIR_ENV",
    "HELP",
    "AgentInstallError",
    "AgentNotInstalledError",
    "AgentPackages",
    "UnknownAgentError",
    "agents_dir",
    "install",
    "install_packages",
    "installed_command",
    "main",
    "prefix_of",
]

_OUTPUT_TAIL: Final = 2000


class UnknownAgentError(ConfigError):
    """An agent name that is not one of :data:`AGENTS`."""


class AgentNotInstalledError(ConfigError):
    """A preset's agent is not installed in the agents dir (``agent_not_installed``)."""

    default_code = "agent_not_installed"


class AgentInstallError(ContainerError):
    """``npm install`` failed or could not start (``agent_install_failed``)."""

    default_code = "agent_install_failed"


@dataclass(frozen=True)
class AgentPackages:
    """One agent's pinned npm packages, its prefix's label, and its command (the first
    item a path relative to the prefix, the rest arguments)."""

    name: AcpPreset
    label: str
    packages: tuple[str, ...]
    command: tuple[str, ...]


AGENTS: Final[Mapping[str, AgentPackages]] = {
    "claude": AgentPackages(
        "claude",
        "0.23.1",
        ("@zed-industries/claude-agent-acp@0.23.1",),
        ("node_modules/.bin/claude-agent-acp",),
    ),
    # The native binary, started directly: the package's node wrapper would leave it
    # orphaned when killed.
    "codex": AgentPackages(
        "codex",
        "0.16.0",
        ("@zed-industries/codex-acp@0.16.0", "@zed-industries/codex-acp-linux-x64@0.16.0"),
        ("node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp",),
    ),
    # The package's postinstall puts the native binary at its bin path.
    "opencode": AgentPackages(
        "opencode",
        "1.18.33",
        ("opencode-ai@1.18.33",),
        ("node_modules/.bin/opencode", "acp"),
    ),
    "gemini": AgentPackages(
        "gemini",
        "0.61.0",
        ("@google/gemini-cli@0.61.0",),
        ("node_modules/.bin/gemini", "--acp"),
    ),
    # pi needs node >= 22.19, which npm serves as the ``node`` package; the preset puts
    # the prefix's node_modules/.bin first on PATH so that pi-acp's ``pi`` runs on it.
    "pi": AgentPackages(
        "pi",
        "0.0.34-0.87.1",
        ("pi-acp@0.0.34", "@earendil-works/pi-coding-agent@0.87.1", "node@22.23.3"),
        ("node_modules/.bin/node", "node_modules/.bin/pi-acp"),
    ),
}


def agents_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The agents dir: ``explicit``, else :func:`~sandstream.core.agents_dir.default_agents_dir`."""
    return Path(explicit) if explicit is not None else default_agents_dir()


def _agent(name: str) -> AgentPackages:
    try:
        return AGENTS[name]
    except KeyError:
        known = ", ".join(AGENTS)
        raise UnknownAgentError(f"unknown agent {name!r} (known: {known})") from None


def prefix_of(name: str, directory: Path) -> Path:
    """The npm prefix of agent ``name`` at its pinned versions under ``directory``."""
    agent = _agent(name)
    return directory / f"{agent.name}-{agent.label}"


def _relative_paths(agent: AgentPackages) -> Iterator[str]:
    yield agent.command[0]
    yield from (part for part in agent.command[1:] if part.startswith("node_modules/"))


def installed_command(name: str, directory: Path) -> list[str]:
    """The command that starts agent ``name`` from ``directory``; raises
    :class:`AgentNotInstalledError` when it, or the agents' shield (:mod:`.shield`), is
    not installed there."""
    agent = _agent(name)
    prefix = prefix_of(name, directory)
    paths = [prefix / part for part in _relative_paths(agent)] + [shield_path(directory)]
    if not all(path.exists() for path in paths):
        raise AgentNotInstalledError(
            f"the {name} agent is not installed in {directory}: run "
            f"`sandstream agents install {name}` (with --dir {directory} or "
            f"{AGENTS_DIR_ENV} set if it is not the default)"
        )
    return [
        str(prefix / part) if part.startswith("node_modules/") else part for part in agent.command
    ]


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise AgentInstallError("npm is not installed (Debian: apt-get install npm)")
    return npm


def install(names: Sequence[str], directory: Path, *, log: bool = True) -> list[Path]:
    """Install agents ``names`` (all when empty) and the agents' shield (:mod:`.shield`)
    into ``directory``; return their prefixes. What is installed already is left as it
    is."""
    agents = [_agent(name) for name in (names or list(AGENTS))]
    directory.mkdir(parents=True, exist_ok=True)
    prefixes = []
    with _locked(directory):
        for agent in agents:
            prefix = prefix_of(agent.name, directory)
            for stale in directory.glob(f".{prefix.name}.*"):
                shutil.rmtree(stale, ignore_errors=True)
            if not prefix.exists():
                _install_one(agent, prefix, log=log)
            prefixes.append(prefix)
        for stale in directory.glob(f".{shield_path(directory).name}.*"):
            stale.unlink(missing_ok=True)
        build_shield(directory)
    return prefixes


def _install_one(agent: AgentPackages, prefix: Path, *, log: bool) -> None:
    install_packages(agent.packages, prefix, what=f"the {agent.name} agent", log=log)


def install_packages(packages: Sequence[str], prefix: Path, *, what: str, log: bool) -> None:
    """``npm install`` ``packages`` into the new npm prefix ``prefix``: into a temp dir
    beside it, renamed when complete (an interrupted install leaves no ``prefix``).
    Raises :class:`AgentInstallError`; ``what`` names them in messages."""
    staging = Path(tempfile.mkdtemp(prefix=f".{prefix.name}.", dir=prefix.parent))
    try:
        if log:
            print(f"agents: installing {what} ({', '.join(packages)})", file=sys.stderr, flush=True)
        command = [
            _npm(),
            "install",
            "--prefix",
            str(staging),
            "--prefer-offline",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            *packages,
        ]
        try:
            done = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
            )
        except OSError as error:
            raise AgentInstallError(f"npm could not start: {error}") from error
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip()[-_OUTPUT_TAIL:]
            raise AgentInstallError(
                f"npm install of {what} failed (exit {done.returncode}): {tail}"
            )
        staging.chmod(0o755)  # mkdtemp's 0700 would shut out a sandbox's other uid
        staging.rename(prefix)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


HELP: Final = "install the ACP agents' npm packages (sandstream agents install [NAME...])"
"""The command's line in ``sandstream --help``."""


def main(argv: Sequence[str]) -> int:
    """``sandstream agents install [NAME...] [--dir DIR]``: install the named agents (all
    five when none is named); 0 when all are installed, 2 for bad usage or an unknown
    name, 1 when npm fails."""
    parser = argparse.ArgumentParser(
        prog="sandstream agents", description="The ACP agents the acp presets run."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    install_parser = commands.add_parser(
        "install", help="install agents (all when none is named) into the agents dir"
    )
    install_parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(AGENTS))
    install_parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"the agents dir (default: ${AGENTS_DIR_ENV}, else $XDG_CACHE_HOME/sandstream/agents)",
    )
    options = parser.parse_args(list(argv))
    directory = agents_dir(options.dir)
    try:
        prefixes = install(options.names, directory)
    except UnknownAgentError as error:
        print(f"sandstream agents install: {error}", file=sys.stderr)
        return 2
    except ContainerError as error:
        print(f"sandstream agents install: {error}", file=sys.stderr)
        return 1
    for prefix in prefixes:
        print(f"agents: {prefix.name} installed in {prefix}", flush=True)
    return 0
