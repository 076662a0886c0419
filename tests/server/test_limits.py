"""Resource limits: sizes parse, limits validate, cgroups are found where they are."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.server.runner.limits import (
    CgroupRoot,
    LimitExceeded,
    ResourceLimits,
    Usage,
    exceeded,
    find_cgroup_root,
    parse_size,
)

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@given(
    st.integers(min_value=1, max_value=10**6),
    st.sampled_from(sorted(UNITS)),
    st.sampled_from(["", "i", "iB", "B"]),
    st.booleans(),
)
def test_sizes_parse_in_any_spelling(number: int, unit: str, suffix: str, lower: bool) -> None:
    if not unit and suffix.startswith("i"):
        suffix = ""
    text = f"{number}{unit}{suffix if unit else suffix.lstrip('i')}"
    assert parse_size(text.lower() if lower else text) == number * UNITS[unit]


@pytest.mark.parametrize("text", ["none", "0", "unlimited", "off"])
def test_no_limit_spellings(text: str) -> None:
    assert parse_size(text) is None


@pytest.mark.parametrize("text", ["", "lots", "-1G", "1X", "G", "1 G B"])
def test_bad_sizes_are_refused_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


@pytest.mark.parametrize(
    "kwargs",
    [{"memory_bytes": 0}, {"processes": -1}, {"cpu_seconds": 0.0}, {"cpu_seconds": float("inf")}],
)
def test_bad_limits_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ResourceLimits(**kwargs)  # type: ignore[arg-type]


def test_each_limit_has_its_own_code() -> None:
    limits = ResourceLimits(memory_bytes=100, processes=2, cpu_seconds=1.0)
    assert exceeded(Usage(memory_bytes=50, processes=2, cpu_seconds=0.5), limits) is None
    cases = {
        "memory_limit": Usage(memory_bytes=101),
        "process_limit": Usage(processes=3),
        "cpu_limit": Usage(cpu_seconds=1.5),
    }
    for code, usage in cases.items():
        hit = exceeded(usage, limits)
        assert isinstance(hit, LimitExceeded) and hit.code == code
    # kernel events count even under the limit (the kernel refused or killed)
    assert exceeded(Usage(oom_kills=1), limits) == exceeded(Usage(memory_bytes=101), limits)
    assert exceeded(Usage(refused_forks=1), ResourceLimits(processes=None)) is not None
    assert exceeded(Usage(memory_bytes=1 << 40), ResourceLimits(memory_bytes=None)) is None


def _proc(tmp_path: Path, mountinfo: str, cgroup: str) -> str:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(mountinfo)
    (proc / "cgroup").write_text(cgroup)
    return str(proc)


def test_cgroup_v1_hierarchies_are_found_below_the_own_cgroup(tmp_path: Path) -> None:
    root = tmp_path / "fs"
    for name, own in (("memory", "box/1"), ("pids", ""), ("cpuacct", "")):
        (root / name / own).mkdir(parents=True, exist_ok=True)
    mountinfo = "".join(
        f"{30 + i} 23 0:{i} / {root / name} rw - cgroup cgroup rw,{name}\n"
        for i, name in enumerate(("memory", "pids", "cpuacct"))
    )
    proc = _proc(tmp_path, mountinfo, "4:memory:/box/1\n8:pids:/\n2:cpuacct:/\n0::/\n")
    found = find_cgroup_root(proc, probe=lambda candidate: True)
    assert found == CgroupRoot(1, root / "memory/box/1", root / "pids", root / "cpuacct")


def test_cgroup_v2_needs_memory_and_pids_for_children(tmp_path: Path) -> None:
    base = tmp_path / "unified" / "svc"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text("cpu memory pids\n")
    (base / "cgroup.subtree_control").write_text("")
    mountinfo = f"41 31 0:38 / {tmp_path / 'unified'} rw - cgroup2 cgroup2 rw\n"
    proc = _proc(tmp_path, mountinfo, "0::/svc\n")
    found = find_cgroup_root(proc, probe=lambda candidate: True)
    assert found == CgroupRoot(2, base, base, base)
    assert set((base / "cgroup.subtree_control").read_text().split()) == {"+memory", "+pids"}
    (base / "cgroup.controllers").write_text("hugetlb\n")  # this machine's unified tree
    assert find_cgroup_root(proc, probe=lambda candidate: True) is None


def test_prune_removes_only_old_empty_sandbox_cgroups(tmp_path: Path) -> None:
    root = CgroupRoot(1, tmp_path / "memory", tmp_path / "pids", tmp_path / "cpu")
    for base in (root.memory, root.pids, root.cpu):
        (base / "sandstream" / "turn_old").mkdir(parents=True)
        (base / "sandstream" / "turn_new").mkdir()
        (base / "sandstream" / "turn_busy").mkdir()
        (base / "sandstream" / "turn_busy" / "cgroup.procs").write_text("123\n")
        old = time.time() - 3600
        for name in ("turn_old", "turn_busy"):
            os.utime(base / "sandstream" / name, (old, old))
    assert root.prune(older_than=60) == 3
    for base in (root.memory, root.pids, root.cpu):
        assert sorted(p.name for p in (base / "sandstream").iterdir()) == ["turn_busy", "turn_new"]
