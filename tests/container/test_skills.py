"""Skills as steps: built-ins, and skills that fail, hang, print garbage or too much."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import ConfigResponse, EnvResponse, ScriptedAgent, ScriptedStep
from tests.support.container import ContainerRun, run_container, run_in_process, wait_group_gone


async def _run_steps(
    workspace: WorkspaceServer,
    work_dir: Path,
    steps: list[tuple[str, Any]],
    *extra_args: str,
    **agent: Any,
) -> ContainerRun:
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(
            steps=[ScriptedStep(tool=name, args=args) for name, args in steps], **agent
        )
    )
    return await run_in_process(workspace.mint_dispatch(), "--work-dir", str(work_dir), *extra_args)


def _terminal_steps(run: ContainerRun) -> list[dict[str, Any]]:
    return [s for s in run.steps() if s["status"] != "running"]


@pytest.mark.parametrize(
    ("skill", "needle"),
    [
        ("fail", "exited with status 3: disk quota exceeded on /work"),
        ("garbage", "invalid JSON: '<html>oops</html>\\n'"),
        ("silent", "printed no JSON answer"),
        ("flood", "output exceeds 1048576 bytes"),
    ],
)
async def test_misbehaving_skill_is_a_failed_step_and_the_run_goes_on(
    workspace: WorkspaceServer, work_dir: Path, test_skills: Path, skill: str, needle: str
) -> None:
    run = await _run_steps(
        workspace,
        work_dir,
        [(skill, {}), ("echo", {"after": True})],
        "--skills-dir",
        str(test_skills),
    )
    assert run.returncode == 0, run
    failed, echoed = _terminal_steps(run)
    assert failed["status"] == "failed"
    assert failed["name"] == skill
    assert needle in failed["error"]
    assert echoed["status"] == "succeeded"
    assert echoed["result"] == {"echo": {"after": True}}
    assert run.terminal["type"] == "result"


@pytest.mark.parametrize(
    ("skill", "needles"),
    [
        ("deep", ["skill printed invalid JSON: '[[[[[[[[[[", "(JSON nested too deeply)"]),
        ("latin1", ["skill printed invalid JSON: ", "(invalid UTF-8: byte 0xe3 at offset 11)"]),
    ],
)
async def test_undecodable_skill_output_fails_only_its_step(
    workspace: WorkspaceServer, work_dir: Path, test_skills: Path, skill: str, needles: list[str]
) -> None:
    """A real container process: the run goes on to its result, exit 0, no traceback."""
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(
            steps=[ScriptedStep(tool=skill, args={}), ScriptedStep(tool="echo", args={"n": 2})]
        )
    )
    run = await run_container(
        workspace.mint_dispatch(), "--work-dir", str(work_dir), "--skills-dir", str(test_skills)
    )
    assert run.returncode == 0, run
    failed, echoed = _terminal_steps(run)
    assert (failed["name"], failed["status"]) == (skill, "failed")
    assert all(needle in failed["error"] for needle in needles), failed["error"]
    assert echoed["status"] == "succeeded"
    assert echoed["result"] == {"echo": {"n": 2}}
    assert run.terminal["type"] == "result"
    assert b"Traceback" not in run.stderr


async def test_hanging_skill_times_out_and_its_group_is_killed(
    workspace: WorkspaceServer, work_dir: Path, test_skills: Path
) -> None:
    run = await _run_steps(workspace, work_dir, [("hang", {})], "--skills-dir", str(test_skills))
    assert run.returncode == 0, run
    (failed,) = _terminal_steps(run)
    assert failed["status"] == "failed"
    assert failed["error"].startswith("skill timed out after 1s")
    leader, grandchild = map(int, (work_dir / "hang.pids").read_text().split())
    await wait_group_gone(leader, [leader, grandchild])


async def test_stop_on_failure_ends_the_run_with_step_failed(
    workspace: WorkspaceServer, work_dir: Path, test_skills: Path
) -> None:
    run = await _run_steps(
        workspace,
        work_dir,
        [("fail", {}), ("echo", {})],
        "--skills-dir",
        str(test_skills),
        stop_on_failure=True,
    )
    assert run.returncode == 1, run
    assert run.terminal["code"] == "step_failed"
    assert "disk quota exceeded" in run.terminal["message"]
    assert [s["name"] for s in run.steps()] == ["fail", "fail"]
    assert not workspace.requests("results")


async def test_unknown_tool_and_invalid_args_are_failed_steps(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run_steps(
        workspace,
        work_dir,
        [
            ("teleport", {}),
            ("read_file", {}),
            ("write_file", {"path": "a.txt", "content": 3}),
            ("list_files", {"recursive": "yes", "colour": "blue"}),
        ],
    )
    assert run.returncode == 0, run
    errors = [s["error"] for s in _terminal_steps(run)]
    assert errors[0].startswith("unknown tool 'teleport' (available: list_files, read_file")
    assert errors[1] == "invalid arguments: $: missing required property 'path'"
    assert errors[2] == "invalid arguments: $.content: expected string"
    assert errors[3] == (
        "invalid arguments: $.recursive: expected boolean; $: unexpected property 'colour'"
    )


async def test_file_skills_stay_inside_the_work_dir(
    workspace: WorkspaceServer, work_dir: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(secret, work_dir / "link.txt")
    run = await _run_steps(
        workspace,
        work_dir,
        [
            ("read_file", {"path": "../secret.txt"}),
            ("read_file", {"path": str(secret)}),
            ("read_file", {"path": "link.txt"}),
            ("write_file", {"path": "../../escape.txt", "content": "x"}),
            ("list_files", {"path": ".."}),
            ("write_file", {"path": "sub/dir/ok.txt", "content": "fine"}),
            ("read_file", {"path": "sub/dir/ok.txt"}),
            ("read_file", {"path": "sub/dir/ok.txt", "offset": 1, "max_bytes": 2}),
        ],
    )
    assert run.returncode == 0, run
    steps = _terminal_steps(run)
    for step in steps[:5]:
        assert step["status"] == "failed", step
        assert "is outside the work dir" in step["error"]
    assert "top secret" not in run.stdout.decode()
    assert not (tmp_path.parent / "escape.txt").exists()
    assert steps[5]["result"] == {"path": "sub/dir/ok.txt", "bytes": 4, "size": 4}
    assert steps[6]["result"]["content"] == "fine"
    assert steps[7]["result"] == {
        "path": "sub/dir/ok.txt",
        "size": 4,
        "offset": 1,
        "content": "in",
        "truncated": True,
    }


async def test_run_shell_reports_exit_code_and_times_out(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run_steps(
        workspace,
        work_dir,
        [
            ("run_shell", {"command": "echo out; echo err >&2; exit 7"}),
            ("run_shell", {"command": "echo started; sleep 300", "timeout_sec": 0.5}),
            (
                "run_shell",
                {"command": "head -c 100 /dev/zero | tr '\\0' a", "max_output_bytes": 10},
            ),
        ],
    )
    assert run.returncode == 0, run
    first, second, third = _terminal_steps(run)
    assert first["result"] == {
        "exit_code": 7,
        "stdout": "out\n",
        "stderr": "err\n",
        "stdout_truncated": False,
        "stderr_truncated": False,
    }
    assert second["status"] == "failed"
    assert second["error"].startswith("skill exited with status 1: command timed out after 0.5s")
    assert third["result"]["stdout"] == "a" * 10
    assert third["result"]["stdout_truncated"] is True


async def test_config_selects_skills(workspace: WorkspaceServer, work_dir: Path) -> None:
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(steps=[ScriptedStep(tool="run_shell", args={"command": "true"})]),
        skills=["read_file"],
    )
    run = await run_in_process(workspace.mint_dispatch(), "--work-dir", str(work_dir))
    assert run.returncode == 0, run
    assert "skills: read_file" in run.logs
    assert run.steps()[-1]["error"] == "unknown tool 'run_shell' (available: read_file)"


async def test_unknown_configured_skill_is_bad_config(workspace: WorkspaceServer) -> None:
    workspace.config = ConfigResponse(agent=ScriptedAgent(), skills=["read_file", "fly"])
    run = await run_in_process(workspace.mint_dispatch())
    assert run.returncode == 1, run
    assert run.terminal["code"] == "bad_config"
    assert run.terminal["message"].startswith("unknown skill(s) fly (available: ")


async def test_skills_path_from_the_env_and_setup(
    workspace: WorkspaceServer, work_dir: Path, test_skills: Path
) -> None:
    # The setup script installs a skills folder into the work dir; the env points at it.
    workspace.env = EnvResponse(
        vars={"SANDSTREAM_SKILLS_PATH": "vendor/skills"},
        setup_script=f"mkdir -p vendor && cp -r {test_skills} vendor/skills\n",
    )
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(steps=[ScriptedStep(tool="echo", args={"n": 1})])
    )
    run = await run_in_process(workspace.mint_dispatch(), "--work-dir", str(work_dir))
    assert run.returncode == 0, run
    assert run.steps()[-1]["result"] == {"echo": {"n": 1}}


@pytest.mark.parametrize(
    ("manifest", "needle"),
    [
        (b'{"skills": [{"name": "bad name!", "run": "x"}]}', "invalid skills manifest"),
        (b'{"skills": [], "note": "\xff"}', "invalid UTF-8: byte 0xff"),
        (b'{"skills": [], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    ],
)
async def test_broken_manifest_is_bad_config(
    workspace: WorkspaceServer, tmp_path: Path, manifest: bytes, needle: str
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_bytes(manifest)
    run = await run_in_process(workspace.mint_dispatch(), "--skills-dir", str(broken))
    assert run.terminal["code"] == "bad_config"
    assert "invalid skills manifest" in run.terminal["message"]
    assert needle in run.terminal["message"]
