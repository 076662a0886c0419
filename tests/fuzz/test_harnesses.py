"""Each fuzz harness, run briefly: it seeds an empty corpus, fuzzes for a few seconds
without a finding, and replays a saved input (docs/fuzzing.md; the long runs are by
hand). The chunking harness has its own tests in tests/core/test_chunking.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HARNESSES = ["sse", "claude_code", "acp", "ui_stream", "stdin", "cursor", "multipart"]
SECONDS = 3
"""How long CI fuzzes each harness."""


def _harness(name: str, *args: str) -> str:
    command = [sys.executable, "-m", f"tests.fuzz.{name}", *args]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.parametrize("name", HARNESSES)
def test_the_harness_seeds_an_empty_corpus_fuzzes_and_replays(name: str, tmp_path: Path) -> None:
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    flags = [f"-max_total_time={SECONDS}", "-seed=1", f"-artifact_prefix={artifacts}/"]
    log = _harness(name, str(corpus), *flags)
    assert "Done " in log and " runs in " in log
    assert list(artifacts.iterdir()) == []  # no crash- or leak- artifact
    saved = sorted(corpus.iterdir())
    assert saved  # the seeds, and what reached new code
    assert f"Executed {saved[0]}" in _harness(name, str(saved[0]))
