"""``benchmarks.chat.budget`` measures the core and the render over the same lines."""

from __future__ import annotations

from benchmarks.chat import budget


def test_it_renders_every_line_the_core_passed() -> None:
    result = budget.measure(lines=2_001, payload=16, repeat=1)
    assert result["lines"] == 2_001
    assert result["core_us"] > 0 and result["render_us"] > 0
    assert 0 < result["bound"] < 1
