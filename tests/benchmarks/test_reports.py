"""What the benchmarks tell the person running them: progress while they run, their
figures next to the published ones, and their goals in words."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.chat.load import PUBLISHED as CHAT_LOAD
from benchmarks.chat.run import PUBLISHED as CHAT
from benchmarks.core.run import PUBLISHED_VS_CEILING, PUBLISHED_VS_NAIVE
from benchmarks.runner.run import PUBLISHED_RATIO
from benchmarks.snapshots.run import PUBLISHED as SNAPSHOTS
from benchmarks.support.report import DOCS, Published
from benchmarks.teardown.run import PUBLISHED_P99

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / DOCS).read_text()
ALL = {
    **{f"chat {key}": figure for key, figure in CHAT.items()},
    **{f"chat load {key}": figure for key, figure in CHAT_LOAD.items()},
    **{f"snapshots {key}": figure for key, figure in SNAPSHOTS.items()},
    "core vs naive": PUBLISHED_VS_NAIVE,
    "core vs ceiling": PUBLISHED_VS_CEILING,
    "runner ratio": PUBLISHED_RATIO,
    "teardown p99": PUBLISHED_P99,
}


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_published_figure_is_the_pages_in_its_section(name: str) -> None:
    figure: Published = ALL[name]
    start = PAGE.index(f"\n## {figure.section}\n")
    end = PAGE.find("\n## ", start + 1)
    section = PAGE[start : end if end != -1 else None]
    written = {f"{figure.value:,.0f}", f"{figure.value:.2f}"}
    assert any(re.search(rf"(?<![\d.,]){re.escape(w)}(?![\d,])", section) for w in written), name


def _benchmark(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` in the checkout, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_chat_benchmark_shows_progress_and_its_figures_against_the_published() -> None:
    done = _benchmark("benchmarks.chat.run", "--lines", "2000", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    assert "... round 1/1: a chat turn, 2,000 lines" in done.stderr
    lines = done.stdout.splitlines()
    published = f"{CHAT['chat_events_per_s'].value:,}"
    assert re.match(rf"chat SSE: [\d,]+ events/s \(published: {published} events/s on ", lines[2])
    assert lines[-2].startswith("goal: chat >= 0.8 of the runner's rate; this run: ")
    assert f'{DOCS}, "Chat: ' in lines[-2] and "NOT met" not in done.stdout


def test_a_turn_too_short_to_time_is_a_clear_error() -> None:
    done = _benchmark("benchmarks.chat.run", "--lines", "5", "--repeat", "1")
    assert done.returncode == 1
    assert re.fullmatch(
        r"\.venv/bin/python -m benchmarks\.chat\.run: all \d steps of the turn came in one "
        r"read, too few to time: ask for more --lines",
        done.stderr.splitlines()[-1],
    ), done.stderr


def test_the_databases_benchmark_runs_a_turn_on_each_store() -> None:
    done = _benchmark("benchmarks.chat.databases", "--lines", "2000", "--repeat", "1", "--json")
    assert done.returncode == 0, done.stderr
    assert "... round 1/1: a turn on postgresql, 2,000 lines" in done.stderr
    result = json.loads(done.stdout)
    for key in ("chat_events_per_s", "chat_events_per_s_to_done", "settle_seconds"):
        assert set(result[key]) == {"sqlite", "postgresql"}
        assert all(value > 0 for value in result[key].values()), result
