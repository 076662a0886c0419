"""What a benchmark tells the person running it, besides its JSON.

While it runs, :func:`progress`: one line on stderr per step that takes a while, so a
run of a minute is never silent. At the end, each headline figure next to the one
docs/benchmarks.md publishes (:class:`Published`, with the machine it was measured on)
and each goal in words (:func:`goal_line`): what it is, what this run measured, and
whether the published run met it — "not met" alone says nothing to someone who has not
read that page.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

__all__ = ["DOCS", "Published", "figure_line", "goal_line", "progress"]

DOCS = "docs/benchmarks.md"


@dataclass(frozen=True)
class Published:
    """A figure as docs/benchmarks.md gives it: ``value`` in ``unit``, measured on
    ``machine``, in the page's section ``section``."""

    value: float
    unit: str
    machine: str
    section: str

    def text(self) -> str:
        return _number(self.value, self.unit)


def progress(message: str) -> None:
    """One line of progress on stderr, at once."""
    print(f"... {message}", file=sys.stderr, flush=True)


def figure_line(name: str, value: float, published: Published) -> str:
    """``chat SSE: 512,340 events/s (published: 597,469 events/s on 2 vCPUs; 0.86x)``."""
    ratio = value / published.value if published.value else float("nan")
    return (
        f"{name}: {_number(value, published.unit)} (published: {published.text()} on "
        f"{published.machine}; {ratio:.2f}x)"
    )


def goal_line(
    goal: str, measured: str, met: bool, published: Published, published_met: bool
) -> str:
    """The goal, this run's figure against it, and the published run's, in one line."""
    verdict = "met" if met else "not met"
    before = "met it" if published_met else "did not meet it"
    return (
        f"goal: {goal}; this run: {measured}, {verdict} (the published run on "
        f'{published.machine}, {published.text()}, {before}: {DOCS}, "{published.section}")'
    )


def _number(value: float, unit: str) -> str:
    if unit in ("", "x"):
        return f"{value:.2f}{unit}"
    if unit == "%":
        return f"{value:.2f}%"
    if unit == "ms":
        return f"{value:,.2f} ms"
    return f"{value:,.0f} {unit}"
