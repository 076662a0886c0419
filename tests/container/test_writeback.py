"""Writeback of the output dir to /results with the upload token."""

from __future__ import annotations

from pathlib import Path

from benchmarks.support.workspace import Purpose, WorkspaceServer
from sandstream.core.schemas import ConfigResponse, ScriptedAgent, ScriptedStep
from tests.support.container import ContainerRun, run_in_process

_MAKE_OUTPUT = ScriptedStep(
    tool="run_shell",
    args={
        "command": "mkdir -p output/sub && printf 'alpha' > output/a.txt"
        " && printf '\\000\\001\\377' > output/sub/bin.dat"
        " && ln -s /etc/hostname output/link && echo scratch > not-output.txt"
    },
)


async def _run(
    workspace: WorkspaceServer,
    work_dir: Path,
    *steps: ScriptedStep,
    upload: bool = True,
    ttl: dict[Purpose, float] | None = None,
) -> ContainerRun:
    workspace.config = ConfigResponse(agent=ScriptedAgent(steps=list(steps)))
    dispatch = workspace.mint_dispatch(upload=upload, ttl=ttl)
    return await run_in_process(dispatch, "--work-dir", str(work_dir))


async def test_output_files_are_uploaded_by_relative_path(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run(workspace, work_dir, _MAKE_OUTPUT)
    assert run.returncode == 0, run
    uploads = {u.path: (u.content, u.content_type) for u in workspace.uploads}
    assert uploads == {
        "a.txt": (b"alpha", "text/plain"),
        "sub/bin.dat": (b"\x00\x01\xff", "application/octet-stream"),
    }
    assert "writeback: skipping link (not a regular file)" in run.logs
    assert "writeback: 2 file(s), 8 bytes written back" in run.logs
    # Writeback happens before the terminal: the result is the last line.
    assert run.terminal["type"] == "result"


async def test_no_output_no_upload_request(workspace: WorkspaceServer, work_dir: Path) -> None:
    run = await _run(workspace, work_dir, ScriptedStep(tool="list_files"))
    assert run.returncode == 0, run
    assert workspace.requests("results") == []


async def test_without_upload_token_files_are_only_logged(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run(workspace, work_dir, _MAKE_OUTPUT, upload=False)
    assert run.returncode == 0, run
    assert workspace.requests("results") == []
    assert "writeback: 2 output file(s) not written back (no upload token)" in run.logs


def _failed_write_back(run: ContainerRun) -> dict[str, object]:
    """The run's ``write_back`` step, which must be one ``running`` then ``failed``."""
    steps = [line for line in run.lines if line["type"] == "step" and line["name"] == "write_back"]
    assert [step["status"] for step in steps] == ["running", "failed"], steps
    assert steps[0]["args"] == {"files": ["a.txt", "sub/bin.dat"]}
    return steps[1]


async def test_a_refused_upload_token_keeps_the_result_and_names_the_files(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    run = await _run(workspace, work_dir, _MAKE_OUTPUT, ttl={"upload": 0})
    assert run.returncode == 0, run
    assert run.terminal["type"] == "result"
    expected = (
        "2 file(s) not written back (a.txt, sub/bin.dat): workspace refused the upload token (401)"
    )
    assert str(_failed_write_back(run)["error"]).startswith(expected)
    assert any(log.startswith(f"writeback: {expected}") for log in run.logs)
    assert workspace.requests("results")[0].reason == "token expired"
    assert workspace.uploads == []


async def test_a_results_server_error_keeps_the_result(
    workspace: WorkspaceServer, work_dir: Path
) -> None:
    workspace.status["results"] = 507
    run = await _run(workspace, work_dir, _MAKE_OUTPUT)
    assert run.returncode == 0, run
    assert run.terminal["type"] == "result"
    error = str(_failed_write_back(run)["error"])
    assert error.startswith(
        "2 file(s) not written back (a.txt, sub/bin.dat): POST /results answered 507"
    )
