"""``keep_large_buffers``: a server's large buffers come from the heap and stay there.

Each check runs in a fresh interpreter (the thresholds are per process, for good).
The measure is the kernel's count of minor page faults, not time: four buffers of
about 1 MiB alive at once, 100 times over, fault their pages in again and again with
glibc's defaults (freed, they are given back to the kernel), and about once with the
thresholds set.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import resource, sys
from sandstream.server.http.malloc import keep_large_buffers
tuned = keep_large_buffers() if sys.argv[1] == "tune" else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
before = faults()
for n in range(100):  # as a turn's reads, outputs and frames: a few alive at once
    buffers = [b"x" * (1024 * 1024 + 4096 * (n % 7 + i)) for i in range(4)]  # written
    del buffers
print(tuned, faults() - before)
"""


def _probe(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if "MALLOC" not in k and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0], int(out[1])


def test_large_buffers_stop_faulting_once_the_thresholds_are_set() -> None:
    tuned, tuned_faults = _probe("tune")
    _, default_faults = _probe("default")
    assert tuned == "True"
    assert tuned_faults < 3_000, tuned_faults  # the heap's pages, reused
    assert default_faults > 3 * tuned_faults, default_faults  # given back, faulted again


@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
        {"MALLOC_MMAP_THRESHOLD_": "131072"},
        {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"},
    ],
)
def test_the_users_own_setting_wins(env: dict[str, str]) -> None:
    tuned, faults = _probe("tune", **env)
    assert tuned == "False"
    assert faults > 5_000, faults
