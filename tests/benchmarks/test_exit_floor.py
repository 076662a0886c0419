"""``benchmarks.teardown.exit_floor`` kills what it starts and reports every trial."""

from __future__ import annotations

import json

import pytest

from benchmarks.teardown import exit_floor


def test_it_times_each_kill_of_both_heaps(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_floor.main(["--trials", "2", "--fifo", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["fifo"] is True
    assert set(result["exit_ms"]) == {"huge", "small"}
    for stats in result["exit_ms"].values():
        assert stats["n"] == 2
        assert 0 < stats["p50"] <= stats["max"] < 10_000
