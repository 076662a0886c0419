"""The build's package list: every package under ``core/``, ``server/`` and
``container/``, found, under its import name ``sandstream.<folder>...``.

The three folders are the subpackages of one import namespace, each mapped onto its
name with ``package_dir``; ``find_packages`` walks each folder (a package is a folder
with an ``__init__.py``), so a new subpackage ships without being listed anywhere.
Everything else (metadata, extras, package data) is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

FOLDERS = ("core", "server", "container")

setup(
    packages=[
        f"sandstream.{folder}{'.' + name if name else ''}"
        for folder in FOLDERS
        for name in ("", *find_packages(folder))
    ],
    package_dir={f"sandstream.{folder}": folder for folder in FOLDERS},
)
