"""The model gateway benchmark runs end to end on a small load and reports both paths."""

from __future__ import annotations

import json

import pytest

from benchmarks.gateway.run import main


def test_the_gateway_benchmark_reports_both_paths(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--trials", "3", "--stream", "1M", "--repeat", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    for path in ("direct", "gateway"):
        assert result[path]["first_byte_ms"]["n"] == 3
        assert result[path]["throughput_mb_s"] > 0
    assert set(result["goals"]) == {"added_first_byte_ms_p50 <= 1", "throughput_ratio >= 0.9"}
