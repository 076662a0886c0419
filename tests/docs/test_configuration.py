"""docs/configuration.md is what the commands' parsers say, and names every variable read."""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path

import pytest

from tests.docs.configuration import COMMAND, render, variables_on_the_page

CHECKOUT = Path(__file__).resolve().parents[2]
PAGE = CHECKOUT / "docs" / "configuration.md"
# Where the commands read their environment, and what they set for the programs they start.
READERS = (
    "server/cli",
    "server/http",
    "server/runner",
    "server/chat/credentials/api_token.py",
    "server/chat/model/agent_profile.py",
    "server/chat/config/settings.py",
    "server/chat/push/settings.py",
    "container",
)
VARIABLE = re.compile(r"(SANDSTREAM|OPENAI|MALLOC|GLIBC)_[A-Z0-9_]*|SANDBOX_URL")


def test_the_page_is_the_rendered_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDSTREAM_LOCK_LEASE", "3")  # the page does not depend on them
    monkeypatch.setenv("SANDSTREAM_DATA_DIR", "/elsewhere")
    rendered = render()
    committed = PAGE.read_text(encoding="utf-8")
    if committed != rendered:
        diff = difflib.unified_diff(
            committed.splitlines(), rendered.splitlines(), "committed", "rendered", lineterm=""
        )
        shown = "\n".join(list(diff)[:60])
        pytest.fail(f"docs/configuration.md is out of date; regenerate it:\n  {COMMAND}\n{shown}")


def test_every_variable_named_where_the_commands_read_them_is_on_the_page() -> None:
    named = set()
    for place in READERS:
        path = CHECKOUT / place
        for source in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            named |= _variables(ast.parse(source.read_text(encoding="utf-8")))
    assert "SANDSTREAM_API_TOKEN" in named and "SANDSTREAM_SKILLS_PATH" in named
    assert named - variables_on_the_page() == set()


def _variables(module: ast.Module) -> set[str]:
    """The string constants of ``module`` that look like a variable's name (those of its
    ``__all__`` are Python names, not variables)."""
    strings = {
        node.value
        for node in ast.walk(module)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    exported = {
        element.value
        for node in module.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        for element in ast.walk(node.value)
        if isinstance(element, ast.Constant)
    }
    return {text for text in strings - exported if VARIABLE.fullmatch(text)}
