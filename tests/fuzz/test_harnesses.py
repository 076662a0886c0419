"""Each fuzz harness, run briefly: it seeds an empty corpus, fuzzes without a finding,
and replays a saved input (docs/fuzzing.md; the long runs are by hand). The runs are
counted, with a fixed seed, so that CI fuzzes the same inputs every time (a prefix of
them on a machine so loaded that the time cap comes first). The chunking harness has
its own tests in tests/core/test_chunking.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = {
    "sse": 30_000,
    "claude_code": 1_000,
    "acp": 1_000,
    "ui_stream": 4_000,
    "stdin": 1_000,
    "cursor": 200_000,
    "multipart": 2_000,
    "push_endpoint": 20_000,
    "push_subscription": 20_000,
    "streams": 20_000,
}
"""Inputs CI tries per harness: about 3 seconds' worth each."""
MAX_SECONDS = 30


def _harness(name: str, *args: str) -> str:
    command = [sys.executable, "-m", f"tests.fuzz.{name}", *args]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.parametrize("name", RUNS)
def test_the_harness_seeds_an_empty_corpus_fuzzes_and_replays(name: str, tmp_path: Path) -> None:
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    flags = [f"-runs={RUNS[name]}", f"-max_total_time={MAX_SECONDS}", "-seed=1"]
    log = _harness(name, str(corpus), *flags, f"-artifact_prefix={artifacts}/")
    assert re.search(r"Done \d+ runs in ", log), log[-2000:]
    assert list(artifacts.iterdir()) == []  # no crash- or leak- artifact
    saved = sorted(corpus.iterdir())
    assert saved  # the seeds, and what reached new code
    assert f"Executed {saved[0]}" in _harness(name, str(saved[0]))
