"""The import arrows run one way: app → roles → shared plumbing → core.

Every ``import`` and ``from … import`` in the source (also inside functions) is read
with :mod:`ast`, relative ones resolved, and checked against the layers below.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "core": "sandstream.core",
    "server": "sandstream.server",
    "container": "sandstream.container",
}

# A package (or module) and the sandstream packages it may not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "sandstream.core": ("sandstream.server", "sandstream.container"),
    "sandstream.container": ("sandstream.server",),
    "sandstream.server": ("sandstream.container",),
    "sandstream.server.http": (
        "sandstream.server.runner",
        "sandstream.server.sessions",
        "sandstream.server.chat",
        "sandstream.server.web",
        "sandstream.server.app",
        "sandstream.server.cli",
    ),
    "sandstream.server.runner": (
        "sandstream.server.sessions",
        "sandstream.server.chat",
        "sandstream.server.web",
        "sandstream.server.app",
        "sandstream.server.cli",
    ),
    "sandstream.server.sessions": (
        "sandstream.server.chat",
        "sandstream.server.web",
        "sandstream.server.app",
        "sandstream.server.cli",
    ),
    "sandstream.server.web": (
        "sandstream.server.runner",
        "sandstream.server.sessions",
        "sandstream.server.chat",
        "sandstream.server.app",
        "sandstream.server.cli",
    ),
    "sandstream.server.chat": (
        "sandstream.server.web",
        "sandstream.server.app",
        "sandstream.server.cli",
    ),
    "sandstream.server.chat.store": ("sandstream.server.chat.mover", "sandstream.server.chat.api"),
    "sandstream.server.app": ("sandstream.server.cli",),
}


# Within the chat, only the routes (api/), their mounting (serving.py) and the package's
# own __init__ use the routes.
for _part in (
    "turns",
    "agents",
    "mover",
    "push",
    "credentials",
    "service",
    "dispatching",
    "targets",
    "records",
    "requests",
    "config",
    "errors",
    "ids",
    "agent_profile",
    "runner_answers",
):
    FORBIDDEN[f"sandstream.server.chat.{_part}"] = ("sandstream.server.chat.api",)


def _modules() -> Iterator[tuple[str, Path]]:
    for folder, prefix in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join([prefix, *parts]), path


def _imports(module: str, path: Path, *, names: bool = True) -> Iterator[str]:
    """The modules ``module`` imports, and with ``names`` each imported name as
    ``module.name`` too (a submodule imported by name)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target
            if names:
                yield from (f"{target}.{alias.name}" for alias in node.names)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _violations(module: str, path: Path) -> list[str]:
    rules = [(owner, banned) for owner, banned in FORBIDDEN.items() if _within(module, owner)]
    found = []
    for target in _imports(module, path):
        for owner, banned in rules:
            for package in banned:
                if _within(target, package) and not _within(target, owner):
                    found.append(f"{module} imports {target} ({owner} may not use {package})")
    return found


MODULES = list(_modules())


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_a_module_imports_only_what_its_layer_may(module: str, path: Path) -> None:
    assert _violations(module, path) == []


def test_outside_the_sessions_only_their_public_api_is_used() -> None:
    found = [
        f"{module} imports {target}"
        for module, path in MODULES
        if not _within(module, "sandstream.server.sessions")
        for target in _imports(module, path, names=False)
        if target.startswith("sandstream.server.sessions.")
    ]
    assert found == []


def test_the_checker_sees_a_wrong_arrow(tmp_path: Path) -> None:
    wrong = tmp_path / "routes.py"
    wrong.write_text(
        "from ..chat.service import ChatService\n"
        "def f():\n    from sandstream.server.app import create_runner_app\n"
    )
    found = _violations("sandstream.server.runner.routes", wrong)
    assert len(found) == 4 and all("sandstream.server.runner may not use" in f for f in found)


def test_benchmarks_do_not_import_the_tests() -> None:
    found = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found += [
            f"{module} imports {target}"
            for target in _imports(module, path)
            if _within(target, "tests")
        ]
    assert found == []
