"""``sandstream agents install``: real npm installs into a temp agents dir (from npm's
cache after the first run), idempotent, atomic, and clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from sandstream.container.agents.acp import install as installer
from sandstream.container.agents.acp.install import (
    AGENTS,
    AgentInstallError,
    AgentNotInstalledError,
    AgentPackages,
    UnknownAgentError,
    install,
    installed_command,
    prefix_of,
)
from sandstream.container.agents.acp.shield import ShieldBuildError, build_shield, shield_path
from sandstream.core.agents_dir import default_agents_dir


def test_install_is_idempotent_and_leaves_no_staging(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    stale = agents / ".claude-0.23.1.interrupted"
    stale.mkdir(parents=True)  # what a killed install leaves behind
    (stale / "half").write_text("x")

    [prefix] = install(["claude"], agents, log=False)
    assert prefix == prefix_of("claude", agents) == agents / "claude-0.23.1"
    command = installed_command("claude", agents)
    assert Path(command[0]).is_file()
    assert Path(command[0]).is_relative_to(prefix)
    inode = prefix.stat().st_ino

    assert install(["claude"], agents, log=False) == [prefix]
    assert prefix.stat().st_ino == inode  # left as it was
    shield = shield_path(agents)
    assert sorted(p.name for p in agents.iterdir()) == [".lock", "claude-0.23.1", shield.name]

    shield.unlink()  # an agents dir of an older release: no shield yet
    with pytest.raises(AgentNotInstalledError, match="sandstream agents install claude"):
        installed_command("claude", agents)
    install(["claude"], agents, log=False)
    assert installed_command("claude", agents) == command


def test_a_failing_shield_build_is_an_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", "false")
    with pytest.raises(ShieldBuildError, match="building the agents' shield failed"):
        build_shield(tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(ShieldBuildError, match="the C compiler could not start"):
        build_shield(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_shield_makes_every_program_non_dumpable(tmp_path: Path) -> None:
    shield = build_shield(tmp_path)
    assert build_shield(tmp_path) == shield  # built once
    # PR_GET_DUMPABLE (3), in this program and in one it starts (execve resets the flag)
    probe = "import ctypes; print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"
    program = f"{probe}; import subprocess, sys; subprocess.run([sys.executable, '-c', {probe!r}])"
    plain = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    shielded = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env={"LD_PRELOAD": str(shield)},
    )
    assert plain.stdout.split() == ["1", "1"], plain.stderr
    assert shielded.stdout.split() == ["0", "0"], shielded.stderr


GUARDED_AGENT: Final = """
import os, subprocess, sys
me = os.getpid()
# its tool, started without the preload (as a statically linked program would be)
tool = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
done = subprocess.run([sys.executable, "-c", sys.argv[1], str(me)], env=tool, check=True)
sleeper = subprocess.Popen(["sleep", "60"])
sleeper.kill()
print("agent kills its tool", sleeper.wait())
print("agent sees an exit status", subprocess.run(["sh", "-c", "exit 7"]).returncode)
"""
GUARDED_TOOL: Final = """
import ctypes, errno, os, resource, signal, subprocess, sys
agent = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
tgkill = {"x86_64": 234, "aarch64": 131}[os.uname().machine]
def attempt(name, action):
    try:
        outcome = "DID" if action() != -1 else errno.errorcode[ctypes.get_errno()]
    except OSError as error:
        outcome = errno.errorcode[error.errno]
    print(name, outcome, flush=True)
attempt("kill", lambda: os.kill(agent, signal.SIGKILL))
attempt("stop", lambda: os.kill(agent, signal.SIGSTOP))
attempt("group", lambda: os.kill(0, signal.SIGKILL))
attempt("tgkill", lambda: libc.syscall(tgkill, agent, agent, signal.SIGKILL))
attempt("pidfd", lambda: signal.pidfd_send_signal(os.pidfd_open(agent), signal.SIGKILL))
limit = resource.prlimit(agent, resource.RLIMIT_CORE)
attempt("prlimit", lambda: resource.prlimit(agent, resource.RLIMIT_CORE, limit))
nice = os.getpriority(os.PRIO_PROCESS, agent)
attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, agent, nice))
attempt("probe", lambda: os.kill(agent, 0))
own = subprocess.Popen(["sleep", "60"])
attempt("own-child", lambda: os.kill(own.pid, signal.SIGKILL))
own.wait()
"""


def test_the_shield_guards_the_agent_from_what_it_runs(tmp_path: Path) -> None:
    """A tool the agent starts, without the preload, cannot signal the agent (not even as
    root: the supervisor refuses, not the kernel's permission check) or change its limits
    or priority; it still signals its own child, and the agent its tools."""
    shield = build_shield(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", GUARDED_AGENT, GUARDED_TOOL],
        capture_output=True,
        text=True,
        env={"LD_PRELOAD": str(shield), "PATH": os.environ["PATH"]},
        start_new_session=True,  # the tool's kill(0) would reach only this group
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done
    refused = ("kill", "stop", "group", "tgkill", "pidfd", "prlimit", "setpriority")
    assert done.stdout.splitlines() == [
        *(f"{name} EPERM" for name in refused),
        "probe DID",
        "own-child DID",
        "agent kills its tool -9",
        "agent sees an exit status 7",
    ], done.stderr


def test_an_unknown_name_is_refused_before_anything_is_installed(tmp_path: Path) -> None:
    with pytest.raises(UnknownAgentError, match=r"unknown agent 'nope' \(known: claude, codex"):
        install(["claude", "nope"], tmp_path, log=False)
    assert list(tmp_path.iterdir()) == []


def test_the_command_says_what_is_unknown(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sandstream.core.cli", "agents", "install", "nope"],
        capture_output=True,
        text=True,
        env={"SANDSTREAM_AGENTS_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 2
    assert "unknown agent 'nope'" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_failing_npm_is_an_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = AgentPackages(
        "claude", "broken", ("@zed-industries/claude-agent-acp@0.0.0-no-such",), ("x",)
    )
    monkeypatch.setitem(installer.AGENTS, "claude", broken)
    with pytest.raises(AgentInstallError, match="npm install of the claude agent failed"):
        install(["claude"], tmp_path, log=False)
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]


def test_a_missing_agent_names_the_command_that_installs_it(tmp_path: Path) -> None:
    with pytest.raises(AgentNotInstalledError, match="sandstream agents install codex") as caught:
        installed_command("codex", tmp_path)
    assert caught.value.code == "agent_not_installed"


@pytest.mark.parametrize("name", list(AGENTS))
def test_every_agent_is_installed_for_the_tests(name: str) -> None:
    # .dev/test installs them into the default agents dir.
    command = installed_command(name, default_agents_dir())
    assert Path(command[0]).is_file()
