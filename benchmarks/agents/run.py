"""Agents benchmark: the ACP path against each agent's own streaming mode, and memory.

``.venv/bin/python -m benchmarks.agents.run [--agents claude,codex,…] [--rounds R]
[--sandbox bwrap|local] [--codex-prefix DIR] [--json]``

Each of the five agents (installed by ``sandstream agents install``) runs the same
scripted turn against the stand-in model on loopback
(:mod:`benchmarks.support.model_server`): one call of its shell tool, then the final
text in several chunks, ``PACE_SEC`` apart, so that the first text can come well
before the last. Per agent and round, side by side (which goes first alternates by
round):

- *ACP*: the real container (``python -m sandstream.container``) started by the
  runner's own launcher (``--sandbox``: ``bwrap`` as ``sandstream runner`` does on
  Linux, with the agents dir bound read-only, or ``local``), its dispatch asking for the
  ``live`` extension and its callbacks served by the stand-in workspace
  (:mod:`benchmarks.support.workspace`); stdin stays open as for a session, and closes
  once the terminal line is in;
- *direct*: the agent's own JSON streaming mode (:mod:`.direct`), as a plain process
  with the environment and config files the preset writes.

Neither path asks permission (Claude Code in ``bypassPermissions``, Gemini CLI in
``yolo``, OpenCode with bash allowed; Codex is in ``full-access`` and pi has no
permission system), so both run the same turn; a request that comes anyway is
answered ``once`` and counted.

Times run from the spawn: *first text* to the first text of the scripted answer (a
``delta`` line; the direct mode's first text event, which for codex and opencode is the whole
message, as those modes do not stream text); *turn* to the end of the answer (the
terminal line; the direct mode's last event); *exit* until nothing of it is left.
The ACP path's overhead per turn is its median turn time less the direct mode's.
*Memory*: the peaks of the summed RSS and PSS of the process tree (bwrap or the
container, the agent, its children), sampled every 20 ms from ``/proc`` (:mod:`.tree`;
RSS counts a page shared by two processes twice, PSS once); and, under bwrap with a
cgroup, the sandbox cgroup's own peak (v2 ``memory.peak``; v1
``memory.max_usage_in_bytes``, which also counts the page cache of the files it read).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final, get_args

import trio

from benchmarks.runner.support import environment
from benchmarks.support.model_server import ModelScript, ModelServer, start_model_server
from benchmarks.support.workspace import WorkspaceServer, start_workspace
from sandstream.container.agents.acp.install import agents_dir, install_packages
from sandstream.container.agents.acp.presets import prepare
from sandstream.core.agents_dir import AGENTS_DIR_ENV, default_agents_dir
from sandstream.core.schemas import AcpAgent, AcpPreset, ConfigResponse
from sandstream.server import BwrapLauncher, ContainerLauncher, LocalSubprocessLauncher
from sandstream.server.runner.launcher import PASSED_ENV

from .direct import STREAMS_DELTAS, classify, direct_command
from .tree import PeakSampler

PRESETS: Final[tuple[AcpPreset, ...]] = get_args(AcpPreset)
CODEX_CLI: Final = "@openai/codex@0.169.0"
"""Codex's own CLI, for its ``exec --json`` mode (codex-acp carries its own core)."""
PROMPT: Final = "Run the command"
COMMAND: Final = "echo hello-from-tool > out.txt && cat out.txt"
TEXT: Final = ("The command ", "ran ", "fine: ", "it wrote ", "hello-from-tool ", "to out.txt.")
PACE_SEC: Final = 0.05
MODES: Final[dict[str, str]] = {"claude": "bypassPermissions", "gemini": "yolo"}
OWN_ENV: Final[dict[str, dict[str, str]]] = {
    "opencode": {"OPENCODE_CONFIG_CONTENT": json.dumps({"permission": {"bash": "allow"}})}
}
TURN_TIMEOUT: Final = 180.0
SPAWN_LOG: Final = "acp agent: running "
"""The container's log line as it starts the agent."""
_STDERR_TAIL: Final = 2000


class AgentBenchmarkError(Exception):
    """A turn that did not end with the scripted answer."""


@dataclass
class Turn:
    """One turn's figures: seconds from the spawn, peak tree RSS and PSS (bytes) and
    the most processes, the cgroup's peak (bytes; ``None`` without one), the text seen,
    and how many permission requests were answered."""

    first_text: float
    turn: float
    exit: float
    rss_peak: int
    pss_peak: int
    processes: int
    cgroup_peak: int | None
    text: str
    asked: int = 0
    agent_spawned: float | None = None
    """ACP only: when the container said it starts the agent (its set-up before)."""


def _spec(preset: AcpPreset, model: ModelServer) -> AcpAgent:
    env = {**model.provider_env(preset), **OWN_ENV.get(preset, {})}
    return AcpAgent(preset=preset, env=env, mode=MODES.get(preset), stall_timeout_sec=120)


def _answers(text: str) -> bool:
    """Whether ``text`` begins the scripted answer (not an agent's own notice)."""
    return "".join(TEXT).startswith(text)


def _cgroup_peak(launcher: ContainerLauncher, turn_id: str) -> int | None:
    if not isinstance(launcher, BwrapLauncher) or launcher.cgroups is None:
        return None
    directory = launcher.cgroups.memory / "sandstream" / turn_id
    name = "memory.peak" if launcher.cgroups.version == 2 else "memory.max_usage_in_bytes"
    try:
        return int((directory / name).read_text())
    except (OSError, ValueError):
        return None


def _lines(pending: bytearray, chunk: bytes | bytearray) -> list[bytes]:
    pending += chunk
    *lines, rest = bytes(pending).split(b"\n")
    pending[:] = rest
    return lines


async def acp_turn(
    launcher: ContainerLauncher, workspace: WorkspaceServer, preset: AcpPreset, model: ModelServer
) -> Turn:
    """One turn through the container; raises :class:`AgentBenchmarkError` if it fails."""
    workspace.config = ConfigResponse(agent=_spec(preset, model))
    dispatch = workspace.mint_dispatch(PROMPT)
    dispatch["extensions"] = ["live"]
    turn_id = f"bench_{preset}_{secrets.token_hex(4)}"
    send, receive = trio.open_memory_channel[bytes](16)
    first = ended = spawned = 0.0
    texts: list[str] = []
    terminal: dict[str, Any] = {}
    asked = 0
    cgroup_peak: int | None = None
    with trio.fail_after(TURN_TIMEOUT):
        async with trio.open_nursery() as nursery:
            start = time.perf_counter()
            run = partial(launcher.run, messages=receive)
            handle = await nursery.start(run, json.dumps(dispatch).encode(), turn_id)
            sampler = PeakSampler(handle.pid)
            pending = bytearray()
            try:
                async with handle.stdout:
                    while chunk := await handle.stdout.receive_some(65536):
                        for raw in _lines(pending, chunk):
                            line = json.loads(raw)
                            kind = line["type"]
                            if kind == "delta" and line["kind"] == "text" and line["text"]:
                                if _answers(line["text"]):
                                    first = first or time.perf_counter() - start
                                texts.append(line["text"])
                            elif kind == "log" and line["message"].startswith(SPAWN_LOG):
                                spawned = time.perf_counter() - start
                            elif kind == "permission" and line["status"] == "pending":
                                asked += 1
                                answer = {"type": "permission", "id": line["id"], "reply": "once"}
                                await send.send(json.dumps(answer).encode())
                            elif kind in ("result", "error"):
                                ended = time.perf_counter() - start
                                terminal = line
                                cgroup_peak = _cgroup_peak(launcher, turn_id)
                                sampler.sample()
                                await send.aclose()
            finally:
                sampler.stop()
                await send.aclose()
    gone = time.perf_counter() - start
    if terminal.get("type") != "result" or not first:
        raise AgentBenchmarkError(f"{preset} through ACP: {terminal or 'no terminal line'}")
    text = "".join(texts)
    return Turn(
        first,
        ended,
        gone,
        sampler.rss,
        sampler.pss,
        sampler.processes,
        cgroup_peak,
        text,
        asked,
        spawned,
    )


def _direct_env(scratch: Path) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    env["TMPDIR"] = str(scratch)
    return env


async def direct_turn(preset: AcpPreset, argv: list[str], model: ModelServer, agents: Path) -> Turn:
    """One turn in the agent's own mode; raises :class:`AgentBenchmarkError` if it fails."""
    with tempfile.TemporaryDirectory(prefix=f"sandstream-bench-{preset}-") as tmp:
        home, work, scratch = (Path(tmp) / name for name in ("home", "work", "tmp"))
        for directory in (home, work, scratch):
            directory.mkdir()
        prepared = prepare(
            _spec(preset, model),
            env=_direct_env(scratch),
            home=home,
            work_dir=work,
            model=None,
            agents_dir=agents,
        )
        first = ended = 0.0
        texts: list[str] = []
        stderr = bytearray()
        start = time.perf_counter()
        process = await trio.lowlevel.open_process(
            argv,
            cwd=work,
            env=prepared.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        sampler = PeakSampler(process.pid)
        assert process.stdout is not None and process.stderr is not None
        try:
            with trio.fail_after(TURN_TIMEOUT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_tail, process.stderr, stderr)
                    pending = bytearray()
                    while chunk := await process.stdout.receive_some(65536):
                        for raw in _lines(pending, chunk):
                            try:
                                event = json.loads(raw)
                            except ValueError:
                                continue  # a line of its own that is not an event
                            what = classify(preset, event)
                            if what is not None and what[0] == "text":
                                if _answers(what[1]):
                                    first = first or time.perf_counter() - start
                                texts.append(what[1])
                            elif what is not None:
                                ended = time.perf_counter() - start
                                sampler.sample()
                    await process.wait()
        finally:
            sampler.stop()
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    os.killpg(process.pid, 9)
                    await process.wait()
        gone = time.perf_counter() - start
        if not (first and ended):
            tail = stderr.decode(errors="replace").strip()[-_STDERR_TAIL:]
            raise AgentBenchmarkError(
                f"{preset} direct: no answer (exit {process.returncode}): {tail}"
            )
        text = "".join(texts)
        return Turn(first, ended, gone, sampler.rss, sampler.pss, sampler.processes, None, text)


async def _tail(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
    while chunk := await stream.receive_some(65536):
        into += chunk
        del into[: -2 * _STDERR_TAIL]


def _launcher(sandbox: str, agents: Path) -> ContainerLauncher:
    """The runner's own launcher, as ``sandstream runner`` makes it for the agents."""
    env = {AGENTS_DIR_ENV: str(agents)}
    if sandbox == "bwrap":
        return BwrapLauncher(env=env, extra_paths=[str(agents)], stderr="discard")
    return LocalSubprocessLauncher(env=env, stderr="discard")


def _median(turns: Sequence[Turn], name: str) -> float:
    return float(statistics.median(getattr(turn, name) for turn in turns))


def _summary(
    preset: AcpPreset, acp: list[Turn], direct: list[Turn], why: str | None
) -> dict[str, Any]:
    ms = 1000.0
    mib = 1 << 20
    row: dict[str, Any] = {
        "agent": preset,
        "rounds": len(acp),
        "acp_agent_spawned_ms": round(_median(acp, "agent_spawned") * ms),
        "acp_first_text_ms": round(_median(acp, "first_text") * ms),
        "acp_turn_ms": round(_median(acp, "turn") * ms),
        "acp_turn_after_spawn_ms": round(
            statistics.median(t.turn - (t.agent_spawned or 0.0) for t in acp) * ms
        ),
        "acp_exit_ms": round(_median(acp, "exit") * ms),
        "acp_rss_peak_mib": round(_median(acp, "rss_peak") / mib, 1),
        "acp_pss_peak_mib": round(_median(acp, "pss_peak") / mib, 1),
        "acp_processes": max(turn.processes for turn in acp),
        "acp_permission_requests": sum(turn.asked for turn in acp),
        "acp_turn_ms_range": [
            round(min(t.turn for t in acp) * ms),
            round(max(t.turn for t in acp) * ms),
        ],
    }
    peaks = [turn.cgroup_peak for turn in acp if turn.cgroup_peak is not None]
    if peaks:
        row["acp_cgroup_peak_mib"] = round(statistics.median(peaks) / mib, 1)
    if not direct:
        row["direct"] = why
        return row
    row.update(
        {
            "direct_first_text_ms": round(_median(direct, "first_text") * ms),
            "direct_turn_ms": round(_median(direct, "turn") * ms),
            "direct_exit_ms": round(_median(direct, "exit") * ms),
            "direct_rss_peak_mib": round(_median(direct, "rss_peak") / mib, 1),
            "direct_pss_peak_mib": round(_median(direct, "pss_peak") / mib, 1),
            "direct_processes": max(turn.processes for turn in direct),
            "direct_streams_deltas": STREAMS_DELTAS[preset],
            "overhead_ms": round((_median(acp, "turn") - _median(direct, "turn")) * ms),
            "turn_ratio": round(_median(acp, "turn") / _median(direct, "turn"), 2),
        }
    )
    return row


def _progress(round_: int, preset: str, path: str, turn: Turn) -> None:
    cgroup = f", cgroup peak {turn.cgroup_peak / (1 << 20):.0f} MiB" if turn.cgroup_peak else ""
    spawned = f"agent at {turn.agent_spawned * 1000:4.0f} ms, " if turn.agent_spawned else ""
    print(
        f"round {round_ + 1} {preset:8} {path:6}: {spawned}"
        f"first text {turn.first_text * 1000:6.0f} ms, "
        f"turn {turn.turn * 1000:6.0f} ms, gone {turn.exit * 1000:6.0f} ms, "
        f"tree RSS {turn.rss_peak / (1 << 20):5.0f} MiB, PSS {turn.pss_peak / (1 << 20):5.0f} MiB "
        f"({turn.processes} processes){cgroup}",
        file=sys.stderr,
        flush=True,
    )


async def run(
    presets: Sequence[AcpPreset], rounds: int, sandbox: str, codex_prefix: Path | None
) -> dict[str, Any]:
    agents = agents_dir()
    expected = "".join(TEXT)
    acp: dict[str, list[Turn]] = {preset: [] for preset in presets}
    direct: dict[str, list[Turn]] = {preset: [] for preset in presets}
    commands = {p: direct_command(p, PROMPT, agents, codex_prefix) for p in presets}
    load_before = os.getloadavg()[0]
    async with trio.open_nursery() as nursery:
        script = ModelScript(command=COMMAND, text=TEXT, pace_sec=PACE_SEC)
        model = await start_model_server(nursery, script)
        workspace = await start_workspace(nursery)
        launcher = _launcher(sandbox, agents)
        for round_ in range(rounds):
            for preset in presets:
                command = commands[preset]
                paths = ["acp", "direct"] if command is not None else ["acp"]
                for path in paths if round_ % 2 == 0 else reversed(paths):
                    if path == "acp":
                        turn = await acp_turn(launcher, workspace, preset, model)
                        acp[preset].append(turn)
                    else:
                        assert command is not None
                        turn = await direct_turn(preset, command, model, agents)
                        direct[preset].append(turn)
                    if not turn.text.endswith(expected):
                        raise AgentBenchmarkError(f"{preset} {path}: answered {turn.text!r}")
                    _progress(round_, preset, path, turn)
        nursery.cancel_scope.cancel()
    why = "no @openai/codex (--codex-prefix)"
    result = {
        "rounds": rounds,
        "sandbox": sandbox,
        "pace_ms": PACE_SEC * 1000,
        "text_chunks": len(TEXT),
        "agents": [_summary(p, acp[p], direct[p], why) for p in presets],
        "turns": {
            p: {"acp": [asdict(t) for t in acp[p]], "direct": [asdict(t) for t in direct[p]]}
            for p in presets
        },
        "load_average_1m_before": round(load_before, 2),
        "environment": environment(),
    }
    return result


def codex_cli_prefix() -> Path:
    """An npm prefix holding :data:`CODEX_CLI`, installed there on first use."""
    prefix = default_agents_dir().parent / "benchmarks" / CODEX_CLI.replace("/", "+")
    if not prefix.exists():
        prefix.parent.mkdir(parents=True, exist_ok=True)
        install_packages([CODEX_CLI], prefix, what="codex's own CLI", log=True)
    return prefix


def _agent_list(value: str) -> list[AcpPreset]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in PRESETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown agent(s) {unknown} (known: {', '.join(PRESETS)})"
        )
    return [preset for preset in PRESETS if preset in names]


def _print(result: dict[str, Any]) -> None:
    print(
        f"{'agent':8} {'ACP 1st':>8} {'own 1st':>8} {'ACP turn':>9} {'own turn':>9} "
        f"{'overhead':>9} {'ratio':>6} {'ACP PSS':>9} {'own PSS':>9} {'cgroup':>9}"
    )
    for row in result["agents"]:
        own = "direct_turn_ms" in row
        cells = [
            f"{row['agent']:8}",
            f"{row['acp_first_text_ms']:6} ms",
            f"{row['direct_first_text_ms']:6} ms" if own else f"{'—':>8}",
            f"{row['acp_turn_ms']:6} ms",
            f"{row['direct_turn_ms']:6} ms" if own else f"{'—':>9}",
            f"{row['overhead_ms']:+6} ms" if own else f"{'—':>9}",
            f"{row['turn_ratio']:6}" if own else f"{'—':>6}",
            f"{row['acp_pss_peak_mib']:5} MiB",
            f"{row['direct_pss_peak_mib']:5} MiB" if own else f"{'—':>9}",
            f"{row.get('acp_cgroup_peak_mib', '—'):>5} MiB",
        ]
        print(" ".join(cells) + ("" if own else f"   ({row['direct']})"))
    print(
        f"rounds {result['rounds']}, sandbox {result['sandbox']}, load "
        f"{result['load_average_1m_before']} → {result['environment']['load_average_1m']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m benchmarks.agents.run", description=__doc__
    )
    parser.add_argument(
        "--agents",
        type=_agent_list,
        default=list(PRESETS),
        help="comma-separated (default: all five)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="turns per agent and path (default 5)"
    )
    parser.add_argument("--sandbox", choices=["bwrap", "local"], default="bwrap")
    parser.add_argument(
        "--codex-prefix",
        type=Path,
        default=None,
        help="an npm prefix holding @openai/codex, for codex's own `exec --json` mode "
        f"(default: {CODEX_CLI} installed with npm into "
        "$XDG_CACHE_HOME/sandstream/benchmarks on first use)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    codex_prefix = args.codex_prefix
    if codex_prefix is None and "codex" in args.agents:
        codex_prefix = codex_cli_prefix()
    result = trio.run(run, args.agents, args.rounds, args.sandbox, codex_prefix)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
