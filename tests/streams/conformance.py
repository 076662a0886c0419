"""Run the Durable Streams server conformance suite against one server; its outcomes.

::

    run = await run_suite(node, url, token=TOKEN, report=tmp_path / "suite.json")
    run.passed, run.failed            # case names (describe titles > test title)
    run.cases[name].messages          # a failed case's assertion messages

The suite (``@durable-streams/server-conformance-tests``) runs under vitest from
tests/node (tests/node/durable_streams/conformance.test.mjs, with its vitest config),
and writes vitest's JSON report to ``report``. Cases fail the run's exit status, not
this call: the outcomes are the report's. No report (vitest itself broke) raises
:class:`AssertionError` with vitest's output. Cancellation kills vitest.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trio

from benchmarks.support.reference_server import NODE_DIR

__all__ = ["Case", "SuiteRun", "run_suite"]

_VITEST: Final = NODE_DIR / "node_modules" / "vitest" / "vitest.mjs"
_CONFIG: Final = NODE_DIR / "durable_streams" / "vitest.config.mjs"
_DEADLINE: Final = 600.0
"""Seconds the whole suite may take (about 30 s against the reference server)."""


@dataclass(frozen=True)
class Case:
    """One case's outcome: ``passed``, ``failed`` or ``skipped``, and why it failed."""

    status: str
    messages: tuple[str, ...] = ()

    def summary(self) -> str:
        """The first line of each failure message (the assertion, not its stack)."""
        return " | ".join(message.strip().splitlines()[0] for message in self.messages if message)


@dataclass
class SuiteRun:
    """The outcome of every case of one run, by name, and how long the run took."""

    cases: dict[str, Case] = field(default_factory=dict)
    seconds: float = 0.0

    def named(self, status: str) -> list[str]:
        return sorted(name for name, case in self.cases.items() if case.status == status)

    @property
    def passed(self) -> list[str]:
        return self.named("passed")

    @property
    def failed(self) -> list[str]:
        return self.named("failed")

    def describe_failures(self, names: list[str] | None = None) -> str:
        """One line per failed case (or per case of ``names``): its name, its status
        unless failed (``absent``: not in this run), and its messages."""
        lines = []
        for name in self.failed if names is None else names:
            case = self.cases.get(name, Case("absent"))
            status = "" if case.status == "failed" else f" [{case.status}]"
            lines.append(f"- {name}{status}: {case.summary()}")
        return "\n".join(lines)


async def run_suite(
    node: Path,
    url: str,
    *,
    report: Path,
    token: str | None = None,
    only: Sequence[str] = (),
) -> SuiteRun:
    """The suite against the server at ``url`` (``token``: its bearer token); with
    ``only``, just the cases of those names."""
    env = {**os.environ, "DURABLE_STREAMS_URL": url, "NO_COLOR": "1"}
    env.pop("DURABLE_STREAMS_TOKEN", None)
    if token is not None:
        env["DURABLE_STREAMS_TOKEN"] = token
    argv = [str(node), str(_VITEST), "run", "--config", str(_CONFIG)]
    argv += ["--reporter=json", f"--outputFile={report}"]
    if only:
        titles = sorted({name.rpartition(" > ")[2] for name in only})
        argv.append("--testNamePattern=(" + "|".join(map(re.escape, titles)) + ")$")
    started = time.monotonic()
    with trio.fail_after(_DEADLINE):
        done = await trio.run_process(
            argv, cwd=NODE_DIR, env=env, capture_stdout=True, capture_stderr=True, check=False
        )
    seconds = time.monotonic() - started
    if not report.exists():
        output = (done.stdout + done.stderr).decode(errors="replace")
        raise AssertionError(f"vitest wrote no report (exit {done.returncode}): {output}")
    return SuiteRun(_outcomes(json.loads(report.read_text())), seconds)


def _outcomes(report: dict[str, object]) -> dict[str, Case]:
    """Each case of vitest's JSON report by name; a name that repeats is an error."""
    cases: dict[str, Case] = {}
    files = report["testResults"]
    assert isinstance(files, list)
    for file in files:
        for result in file["assertionResults"]:
            name = " > ".join([*result["ancestorTitles"], result["title"]])
            assert name not in cases, f"two cases are named {name!r}"
            status = "skipped" if result["status"] in ("pending", "todo") else result["status"]
            cases[name] = Case(status, tuple(result["failureMessages"]))
    return cases
