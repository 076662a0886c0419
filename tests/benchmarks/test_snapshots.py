"""``benchmarks.snapshots`` at a tiny size, so that it keeps running: every figure in its
JSON and its restores checked against the workspace; the workspace the same from the
same seed; and the check that a restored tree equals the workspace telling a changed
one apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.snapshots.generate import edit_files, generate_workspace
from benchmarks.snapshots.run import CASES, RestoreMismatchError, compare, listing

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_reports_its_figures_and_restores_the_workspace() -> None:
    tiny = ["--files", "40", "--megabytes", "0.5", "--edited", "2", "--repeat", "1", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.snapshots.run", *tiny],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "... round 1/1: restore against tar -x" in done.stderr
    result = json.loads(done.stdout)
    workspace = result["workspace"]
    assert workspace["files"] == 40 and workspace["links"] >= 2
    assert 0.45e6 <= workspace["bytes"] <= 0.55e6
    for case in CASES:
        save = result["save"][case]
        assert save["snapshot"]["p50_ms"] > 0 and save["tar"]["p50_ms"] > 0, case
        assert save["take_p50_ms"] > 0 and save["ratio"] > 0, case
    assert result["save"]["first"]["blobs_sent"] == workspace["distinct_blobs"]
    assert (
        result["save"]["unchanged"]["blobs_sent"] == result["save"]["unchanged"]["pack_bytes"] == 0
    )
    assert result["save"]["edited"]["blobs_sent"] == result["files_edited"] == 2
    restore = result["restore"]
    assert restore["verified"] is True
    assert restore["compared_paths"] == sum(workspace[key] for key in ("files", "folders", "links"))
    assert restore["snapshot"]["p50_ms"] > 0 and restore["tar"]["p50_ms"] > 0
    stored = result["stored"]
    manifest = stored["manifest_json_bytes"]
    # An unchanged workspace's manifest is its last turn's: the store has it already.
    assert stored["unchanged"] == {
        "blob_bytes": 0,
        "manifest_bytes": 0,
        "fraction": 0.0,
        "tar_fraction": 1.0,
    }
    assert stored["first"]["manifest_bytes"] == stored["manifest_zlib_bytes"]
    assert 0 < stored["edited"]["blob_bytes"] < stored["first"]["blob_bytes"] <= workspace["bytes"]
    assert 0 < stored["manifest_zlib_bytes"] < manifest
    assert stored["tar_archive_bytes"] > workspace["bytes"]
    assert set(result["goals"]) == {"restore_p50_ms", "unchanged_stored_fraction"}


def test_a_seed_makes_the_same_workspace(tmp_path: Path) -> None:
    made = [
        generate_workspace(tmp_path / name, files=60, megabytes=0.3, seed=seed)
        for name, seed in (("a", 3), ("b", 3), ("c", 4))
    ]
    first, again, other = (listing(workspace.roots) for workspace in made)
    assert first == again
    assert first != other
    assert sum(kind == "file" for kind, _, _ in first.values()) == 60
    links = [path for path, (kind, _, _) in first.items() if kind == "symlink"]
    assert "work/node_modules/.bin" in {path.rpartition("/")[0] for path in links}
    assert any(mode & 0o111 for kind, mode, _ in first.values() if kind == "file")


def test_a_tree_that_differs_from_the_workspace_is_told_apart(tmp_path: Path) -> None:
    workspace = generate_workspace(tmp_path / "w", files=40, megabytes=0.1)
    original = listing(workspace.roots)
    compare(listing(workspace.roots), original, "the same tree")
    (changed,) = edit_files(workspace, 1, turn=1)
    with pytest.raises(RestoreMismatchError, match="1 changed"):
        compare(listing(workspace.roots), original, "an edited tree")
    original = listing(workspace.roots)
    os.chmod(changed, 0o600)
    with pytest.raises(RestoreMismatchError, match="1 changed"):
        compare(listing(workspace.roots), original, "a tree with a mode changed")
    changed.unlink()
    with pytest.raises(RestoreMismatchError, match="1 path"):
        compare(listing(workspace.roots), original, "a tree with a file missing")
