"""A local container's ``TMPDIR`` is its own and goes with it, whatever it left there."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from benchmarks.support.workspace import WorkspaceServer
from sandstream.server.runner.launcher import remove_tree
from tests.server.harness import RunnerServer, parse_stream, scripted, shell

NOBODY = 65534


async def test_it_is_removed_with_its_read_only_dirs_and_links_never_followed(
    server: RunnerServer, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o555)
    workspace.config = scripted(
        shell(
            'mkdir -p "$TMPDIR/cache/mod" && touch "$TMPDIR/cache/mod/file" '
            f'&& ln -s {outside} "$TMPDIR/cache/link" '
            '&& chmod 555 "$TMPDIR/cache/mod" "$TMPDIR/cache" && echo "$TMPDIR"'
        )
    )
    async with server.client() as client:
        response = await client.post("/stream", json=workspace.mint_dispatch())
    lines = parse_stream(response.content)
    assert lines[-1]["type"] == "result", lines[-1]
    (step,) = [line for line in lines if line.get("status") == "succeeded"]
    container_tmp = Path(step["result"]["stdout"].strip())
    assert container_tmp.parent == Path(tempfile.gettempdir())  # its own, in the runner's
    await server.wait_records(1)
    assert not container_tmp.exists()
    assert stat.S_IMODE(outside.stat().st_mode) == 0o555  # the link was not followed
    outside.chmod(0o755)


def _as_nobody(base: Path, remove: bool) -> tuple[bool, int]:
    """In a child as an unprivileged user (root ignores permission bits): make a tree
    with read-only dirs under ``base``, then remove it with :func:`remove_tree` (or
    with ``shutil.rmtree`` alone); whether it is gone, and the errors reported."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no trio, no logging, just the file system
        status = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            tree = base / "tmp"
            (tree / "cache" / "mod").mkdir(parents=True)
            (tree / "cache" / "mod" / "file").write_bytes(b"x")
            (tree / "cache" / "mod").chmod(0o555)
            (tree / "cache").chmod(0o555)
            if remove:
                errors = len(remove_tree(str(tree)))
            else:
                errors = 0
                shutil.rmtree(tree, onerror=lambda *_: None)
            os.write(write_end, b"%d %d" % (not tree.exists(), errors))
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    try:
        _, status = os.waitpid(pid, 0)
        report = os.read(read_end, 64).split()
    finally:
        os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0
    return report[0] == b"1", int(report[1])


def test_remove_tree_opens_read_only_dirs_for_an_unprivileged_runner() -> None:
    # Outside the test's own TMPDIR, whose parents only root may enter; removed below.
    base = Path(tempfile.mkdtemp(prefix="sandstream-test-", dir="/tmp"))
    try:
        base.chmod(0o777)  # the child, as nobody, works in here
        assert _as_nobody(base, remove=False) == (False, 0)  # rmtree alone leaves it
        (base / "tmp" / "cache").chmod(0o755)
        (base / "tmp" / "cache" / "mod").chmod(0o755)
        shutil.rmtree(base / "tmp")
        assert _as_nobody(base, remove=True) == (True, 0)
    finally:
        shutil.rmtree(base)
