"""Every cross-reference in the code's docstrings names something that exists.

A reference such as ``:class:`~..store.ChatStore``` or
``:meth:`~sandstream.server.chat.turns.ChatTurns.stream_body``` (relative ones resolved
against the module that holds it) must import and reach its object, so a module moved
or a class renamed cannot leave a docstring pointing at nothing. An ``:attr:`` set only
in ``__init__`` is found as ``self.<name>`` in its class's source.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from collections.abc import Iterator

import pytest

import sandstream.container
import sandstream.core
import sandstream.server

ROLE = re.compile(r":(mod|class|func|meth|data|attr|exc|obj):`~?([^`<]*?)(?:\s*<([^>]+)>)?`")


def _modules() -> Iterator[types.ModuleType]:
    for root in (sandstream.core, sandstream.server, sandstream.container):
        yield root
        for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
            if not info.name.endswith("__main__"):
                yield importlib.import_module(info.name)


MODULES = list(_modules())


def _absolute(target: str, module: types.ModuleType) -> str:
    if not target.startswith("."):
        return target
    is_package = (module.__file__ or "").endswith("__init__.py")
    package = module.__name__ if is_package else module.__name__.rpartition(".")[0]
    level = len(target) - len(target.lstrip("."))
    base = package.split(".")[: len(package.split(".")) - level + 1]
    rest = target.lstrip(".")
    return ".".join([*base, rest] if rest else base)


def _reaches(target: str, role: str) -> bool:
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for index, attribute in enumerate(parts[cut:]):
            last = cut + index == len(parts) - 1
            if hasattr(found, attribute):
                found = getattr(found, attribute)
            elif last and role == "attr" and inspect.isclass(found):
                return f"self.{attribute}" in inspect.getsource(found)
            else:
                return False
        return True
    return False


def _broken(module: types.ModuleType) -> list[str]:
    source = inspect.getsource(module)
    found = []
    for match in ROLE.finditer(source):
        role, text, explicit = match.groups()
        target = (explicit or text).strip()
        if not target.startswith((".", "sandstream.")):
            continue  # a name in scope, or another project's
        if not _reaches(_absolute(target, module), role):
            found.append(match.group(0))
    return found


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_every_reference_in_a_docstring_resolves(module: types.ModuleType) -> None:
    assert _broken(module) == []


def test_the_checker_sees_a_reference_to_nothing() -> None:
    fake = types.ModuleType("sandstream.server.chat.fake")
    fake.__file__ = "/x/sandstream/server/chat/fake.py"
    assert _reaches(_absolute(".model.ChatError", fake), "class")
    assert not _reaches(_absolute(".errors.ChatError", fake), "class")
    assert not _reaches("sandstream.server.chat.turns.ChatTurns.no_such_method", "meth")
