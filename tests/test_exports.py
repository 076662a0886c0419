"""Every package's importable API is what its ``__all__`` says, and every module's
``__all__`` names something that exists.

A package's public names (no leading underscore, not a submodule, not a
``from __future__`` feature) must be exactly its ``__all__``: a name imported for use
and not meant as API shows up here, as does one listed but gone.
"""

from __future__ import annotations
import __future__

import importlib
import pkgutil
import types
from collections.abc import Iterator

import pytest

import sandstream.container
import sandstream.core
import sandstream.server

ROOTS = (sandstream.core, sandstream.server, sandstream.container)
FUTURE_FEATURES = set(__future__.all_feature_names)


def _walk() -> Iterator[tuple[str, bool]]:
    for root in ROOTS:
        yield root.__name__, True
        for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
            if not info.name.rpartition(".")[2].startswith("_") or info.ispkg:
                yield info.name, info.ispkg


MODULES = sorted(set(_walk()))
PACKAGES = [name for name, is_package in MODULES if is_package]


def _public_names(package: types.ModuleType) -> set[str]:
    return {
        attribute
        for attribute, value in vars(package).items()
        if not attribute.startswith("_")
        and not isinstance(value, types.ModuleType)
        and attribute not in FUTURE_FEATURES
    }


@pytest.mark.parametrize("name", PACKAGES)
def test_a_packages_public_names_are_its_all(name: str) -> None:
    package = importlib.import_module(name)
    listed = package.__all__
    assert len(listed) == len(set(listed)), f"{name}.__all__ lists a name twice"
    assert _public_names(package) == set(listed)


@pytest.mark.parametrize("name", [name for name, _ in MODULES])
def test_every_name_in_all_exists(name: str) -> None:
    module = importlib.import_module(name)
    missing = [entry for entry in getattr(module, "__all__", ()) if not hasattr(module, entry)]
    assert missing == []


def test_the_check_sees_a_leaked_name() -> None:
    package = types.ModuleType("fake")
    vars(package).update(kept=1, leaked=2, annotations=3, submodule=types.ModuleType("sub"))
    assert _public_names(package) == {"kept", "leaked"}
