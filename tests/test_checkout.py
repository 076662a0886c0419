"""What a new user meets first: the README's commands, the ignored data dir, docs whose
links lead somewhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {"README.md": README} | {
    f"docs/{path.name}": path.read_text() for path in (ROOT / "docs").glob("*.md")
}


def _section(markdown: str, title: str) -> str:
    start = markdown.index(f"\n## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end != -1 else None]


def _shell_lines(markdown: str) -> list[str]:
    """The command lines of the ``sh`` code blocks, without comments."""
    blocks = re.findall(r"```sh\n(.*?)```", markdown, flags=re.DOTALL)
    lines = [line.split(" #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]


def test_the_readme_shows_two_commands_and_they_exist() -> None:
    section = _section(README, "Run it")
    first_block = section[: section.index("```\n", section.index("```sh")) + 4]
    commands = _shell_lines(first_block)
    assert commands == [".dev/serve", ".dev/test"]
    for command in commands:
        assert os.access(ROOT / command, os.X_OK), command


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^[A-Z_=$a-z ]*\.dev/test \"\$@\"", ci, flags=re.MULTILINE)


def test_the_guide_installs_from_a_checkout_and_runs_the_venv_python() -> None:
    lines = _shell_lines(README) + _shell_lines(DOCS["docs/guide.md"])
    assert not [line for line in lines if re.search(r"pip install '?sandstream\b", line)]
    assert not [line for line in lines if re.match(r"python3? ", line)]
    assert any(re.fullmatch(r"pip install \./sandstream\s*", line) for line in lines)


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_the_data_dir_with_the_tokens_is_ignored_by_git() -> None:
    for path in ("sandstream-data/api-token", "sandstream-data/runner-token"):
        subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", path], check=True)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(markdown: str) -> set[str]:
    without_code = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    return {_anchor(h) for h in re.findall(r"^#+ (.*)$", without_code, flags=re.MULTILINE)}


def test_every_relative_link_in_the_docs_leads_to_a_file_and_heading() -> None:
    broken = []
    for name, text in DOCS.items():
        here = (ROOT / name).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (here / path).resolve() if path else ROOT / name
            if not file.exists():
                broken.append(f"{name}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
                broken.append(f"{name}: {target} (no such heading)")
    assert broken == []


def test_the_anchor_rule_matches_githubs() -> None:
    assert _anchor("Durable sessions (seed 001)") == "durable-sessions-seed-001"
    assert _anchor("`POST /sessions` → `201`") == "post-sessions--201"
