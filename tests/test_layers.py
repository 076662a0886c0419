"""The import arrows run one way, through each package's API, and every module is placed.

The three trees are made of **units**: a package with everything under it, or one
module. :data:`CONTAINER` and :data:`SERVER` rank theirs, lowest first; a unit may
import its own modules, and a unit of a lower rank of its tree (or the core) only
through that unit's API: the package itself (its ``__init__``), never a module inside
it. A module that no unit holds fails, so a new package is placed when it is made.
Every ``import`` and ``from … import`` (also inside functions) is read with :mod:`ast`,
relative ones resolved.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "core": "sandstream.core",
    "server": "sandstream.server",
    "container": "sandstream.container",
}

CORE = "sandstream.core"
"""The sans-IO core: below everything, importing no other sandstream unit."""

CONTAINER: list[list[str]] = [["sandstream.container"]]
"""The program inside a sandbox, over the core."""

SERVER: list[list[str]] = [
    ["sandstream.server.errors", "sandstream.server.settings_table"],
    ["sandstream.server.http", "sandstream.server.databases"],
    ["sandstream.server.gateway"],
    ["sandstream.server.streams", "sandstream.server.runner"],
    ["sandstream.server.sessions", "sandstream.server.web"],
    ["sandstream.server.chat.model"],
    ["sandstream.server.chat.credentials"],
    ["sandstream.server.chat.store"],
    ["sandstream.server.chat.push", "sandstream.server.chat.mover"],
    ["sandstream.server.chat.config"],
    ["sandstream.server.chat.turns"],
    ["sandstream.server.chat.agents"],
    ["sandstream.server.chat.api"],
    ["sandstream.server.chat"],
    ["sandstream.server.app"],
    ["sandstream.server.cli"],
    ["sandstream.server"],
]
"""The server, over the core: shared plumbing, the roles, the chat's parts by
sub-role, the chat's root (which mounts them), the app, the command line, and the
package's root (its API)."""

ROOFS = frozenset({"sandstream.server", "sandstream.server.chat"})
"""Units that hold only their ``__init__`` and the modules directly in them: their
subpackages are units of their own, each ranked on its own line."""


def _ranks() -> dict[str, tuple[str, int]]:
    ranks = {CORE: ("core", 0)}
    for tree, layers in (("container", CONTAINER), ("server", SERVER)):
        for rank, units in enumerate(layers, start=1):
            ranks.update((unit, (tree, rank)) for unit in units)
    return ranks


RANKS = _ranks()


def _modules() -> Iterator[tuple[str, Path]]:
    for folder, prefix in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join([prefix, *parts]), path


MODULES = dict(_modules())
PACKAGES = frozenset(module for module, path in MODULES.items() if path.name == "__init__.py")


def unit_of(module: str) -> str | None:
    """The unit holding ``module``: the longest unit it is in, where a roof holds only
    its ``__init__`` and the plain modules directly in it."""
    matches = [unit for unit in RANKS if module == unit or module.startswith(unit + ".")]
    if not matches:
        return None
    unit = max(matches, key=len)
    inside = module.removeprefix(unit).removeprefix(".")
    if unit in ROOFS and inside and ("." in inside or module in PACKAGES):
        return None
    return unit


def _imports(module: str, path: Path) -> Iterator[tuple[str, list[str]]]:
    """Each sandstream module ``module`` imports, with the names it takes from it."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sandstream."):
                    yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target == "sandstream" or target.startswith("sandstream."):
                yield target, [alias.name for alias in node.names]


@functools.cache
def _bound(package: str) -> frozenset[str]:
    """The names a package's ``__init__`` binds itself (not its submodules')."""
    path = MODULES.get(package)
    if path is None or path.name != "__init__.py":
        return frozenset()
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(names)


def violations(module: str, path: Path) -> list[str]:
    """What is wrong with ``module``'s imports (or its place)."""
    own = unit_of(module)
    if own is None:
        return [f"{module} is in no unit: place its package in tests/test_layers.py"]
    tree, rank = RANKS[own]
    found = []
    for target, names in _imports(module, path):
        for name in names:
            if f"{target}.{name}" in MODULES and name not in _bound(target):
                target = f"{target}.{name}"  # a submodule taken by name
        other = unit_of(target)
        if other == own:
            continue
        if other is None:
            found.append(f"{module} imports {target}, which is in no unit")
            continue
        other_tree, other_rank = RANKS[other]
        if other_tree not in ("core", tree) or (other_tree == tree and other_rank >= rank):
            found.append(f"{module} imports {target} ({own} may not use {other})")
        elif target != other:
            found.append(f"{module} imports {target}, inside {other}: use {other}'s API")
    return found


@pytest.mark.parametrize(("module", "path"), MODULES.items(), ids=list(MODULES))
def test_a_module_imports_only_lower_units_through_their_api(module: str, path: Path) -> None:
    assert violations(module, path) == []


def test_every_unit_exists() -> None:
    assert [unit for unit in RANKS if unit not in MODULES] == []


def test_the_checker_sees_a_wrong_arrow_a_reach_inside_and_an_unplaced_module(
    tmp_path: Path,
) -> None:
    wrong = tmp_path / "routes.py"
    wrong.write_text(
        "from sandstream.server.chat import ChatService\n"
        "from sandstream.server.http.problems import problem\n"
        "def f():\n    from sandstream.server.app import create_runner_app\n"
    )
    found = violations("sandstream.server.runner.routes", wrong)
    assert found == [
        "sandstream.server.runner.routes imports sandstream.server.chat "
        "(sandstream.server.runner may not use sandstream.server.chat)",
        "sandstream.server.runner.routes imports sandstream.server.http.problems, inside "
        "sandstream.server.http: use sandstream.server.http's API",
        "sandstream.server.runner.routes imports sandstream.server.app "
        "(sandstream.server.runner may not use sandstream.server.app)",
    ]
    unplaced = violations("sandstream.server.newrole.thing", wrong)
    assert unplaced == [
        "sandstream.server.newrole.thing is in no unit: place its package in tests/test_layers.py"
    ]


def test_benchmarks_do_not_import_the_tests() -> None:
    found = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        package = module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                target = node.module or ""
            elif isinstance(node, ast.Import):
                target = node.names[0].name
            else:
                continue
            if target == "tests" or target.startswith("tests."):
                found.append(f"{module} imports {target} ({package})")
    assert found == []
