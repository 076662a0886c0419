"""Skills: folders of executable recipes described by a ``manifest.json``.

A skill (:class:`~sandstream.core.schemas.SkillManifest`) runs as a subprocess in its own
process group, in the work dir, with its args as JSON on stdin, and answers one JSON
value on stdout. Bad output — a non-zero exit, a timeout, not JSON, over the size bound —
is a failed call (:class:`SkillOutcome`, with the stderr tail), never an exception: the
agent loop goes on. Built-in skills are in ``builtin_skills/`` (docs/container.md, "Skills").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from sandstream.core import JSONInputError, SkillManifest, SkillSpec, decode_json

from .errors import ConfigError
from .jsonschema_lite import validate
from .procs import KILL_GRACE, run_in_group

__all__ = [
    "BUILTIN_SKILLS_DIR",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "MANIFEST_NAME",
    "Skill",
    "SkillOutcome",
    "SkillRegistry",
    "SkillRunner",
    "skill_env",
]

MANIFEST_NAME: Final = "manifest.json"
BUILTIN_SKILLS_DIR: Final = Path(__file__).resolve().parent / "builtin_skills"
DEFAULT_MAX_OUTPUT_BYTES: Final = 1 << 20
_STDERR_TAIL: Final = 2000


@dataclass(frozen=True)
class Skill:
    """A skill from a manifest, with the folder its ``run`` path is relative to."""

    spec: SkillSpec
    folder: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def executable(self) -> Path:
        return self.folder / self.spec.run

    def argv(self) -> list[str]:
        """The command line: ``*.py`` with this Python, ``*.sh`` with bash, else direct."""
        path = str(self.executable)
        if path.endswith(".py"):
            return [sys.executable, path]
        if path.endswith(".sh"):
            return ["bash", path]
        return [path]

    def as_openai_tool(self) -> dict[str, Any]:
        """The skill as a Chat Completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.spec.name,
                "description": self.spec.description,
                "parameters": self.spec.parameters,
            },
        }


class SkillRegistry:
    """The skills available to a run, by name."""

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        self._skills: dict[str, Skill] = {}
        for skill in skills:
            self._skills[skill.name] = skill

    @classmethod
    def load(cls, folders: Sequence[Path]) -> SkillRegistry:
        """Load the manifests of ``folders``; a later folder's skill overrides an earlier one.

        Raises :class:`ConfigError` if a folder has no readable, valid manifest or a
        manifest names an executable that does not exist.
        """
        skills: list[Skill] = []
        for folder in folders:
            skills.extend(_load_folder(folder))
        return cls(skills)

    def names(self) -> list[str]:
        return sorted(self._skills)

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)

    def __len__(self) -> int:
        return len(self._skills)

    def __iter__(self) -> Iterator[Skill]:
        return iter([self._skills[name] for name in self.names()])

    def select(self, names: Sequence[str] | None) -> SkillRegistry:
        """The named subset (``None``: all). Raises :class:`ConfigError` on unknown names."""
        if names is None:
            return self
        unknown = [name for name in names if name not in self._skills]
        if unknown:
            raise ConfigError(
                f"unknown skill(s) {', '.join(unknown)} "
                f"(available: {', '.join(self.names()) or 'none'})"
            )
        return SkillRegistry(self._skills[name] for name in names)


def _load_folder(folder: Path) -> list[Skill]:
    manifest_path = folder / MANIFEST_NAME
    try:
        raw = manifest_path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read skills manifest {manifest_path}: {exc}") from exc
    try:
        manifest = decode_json(raw, SkillManifest)
    except JSONInputError as exc:
        raise ConfigError(f"invalid skills manifest {manifest_path}: {exc}") from exc
    skills = [Skill(spec=spec, folder=folder.resolve()) for spec in manifest.skills]
    for skill in skills:
        if not skill.executable.is_file():
            raise ConfigError(f"skill {skill.name!r}: {skill.executable} does not exist")
    return skills


@dataclass(frozen=True)
class SkillOutcome:
    """The result of one skill call: ``result`` if ``ok``, else ``error``."""

    ok: bool
    result: Any = None
    error: str | None = None

    @classmethod
    def failure(cls, error: str) -> SkillOutcome:
        return cls(ok=False, error=error)


class SkillRunner:
    """Runs skills as subprocesses in the work dir with the run's environment."""

    def __init__(
        self,
        registry: SkillRegistry,
        *,
        work_dir: Path,
        env: Mapping[str, str],
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        kill_grace: float = KILL_GRACE,
    ) -> None:
        self.registry = registry
        self.work_dir = work_dir
        self.env = dict(env)
        self.max_output_bytes = max_output_bytes
        self.kill_grace = kill_grace

    async def run(self, name: str, args: Any) -> SkillOutcome:
        """Validate ``args`` and run skill ``name``; never raises for a failing skill.

        On cancellation the skill's process group is terminated and
        :class:`trio.Cancelled` propagates.
        """
        skill = self.registry.get(name)
        if skill is None:
            available = ", ".join(self.registry.names()) or "none"
            return SkillOutcome.failure(f"unknown tool {name!r} (available: {available})")
        problems = validate(args, skill.spec.parameters)
        if problems:
            return SkillOutcome.failure("invalid arguments: " + "; ".join(problems[:5]))
        return await self._execute(skill, args)

    async def _execute(self, skill: Skill, args: Any) -> SkillOutcome:
        stdout = _BoundedBuffer(self.max_output_bytes)
        stderr = _TailBuffer(_STDERR_TAIL)
        env = {**self.env, "SANDSTREAM_SKILL_DIR": str(skill.folder)}
        try:
            outcome = await run_in_group(
                skill.argv(),
                cwd=self.work_dir,
                env=env,
                stdin=msgspec.json.encode(args),
                on_stdout=stdout.feed,
                on_stderr=stderr.feed,
                timeout=skill.spec.timeout_sec,
                grace=self.kill_grace,
            )
        except OSError as exc:
            return SkillOutcome.failure(f"cannot start skill {skill.name!r}: {exc}")
        tail = stderr.text()
        suffix = f": {tail}" if tail else ""
        if outcome.timed_out:
            return SkillOutcome.failure(
                f"skill timed out after {skill.spec.timeout_sec:g}s{suffix}"
            )
        if outcome.returncode != 0:
            return SkillOutcome.failure(f"skill {outcome.describe()}{suffix}")
        if stdout.overflowed:
            return SkillOutcome.failure(
                f"skill output exceeds {self.max_output_bytes} bytes{suffix}"
            )
        data = stdout.data()
        if not data.strip():
            return SkillOutcome.failure(f"skill printed no JSON answer{suffix}")
        try:
            result = decode_json(data)
        except JSONInputError as exc:
            preview = data[:200].decode("utf-8", "replace")
            return SkillOutcome.failure(f"skill printed invalid JSON: {preview!r} ({exc}){suffix}")
        return SkillOutcome(ok=True, result=result)


class _BoundedBuffer:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: list[bytes] = []
        self._size = 0
        self.overflowed = False

    def feed(self, chunk: bytes) -> None:
        if self.overflowed:
            return
        self._size += len(chunk)
        if self._size > self._limit:
            self.overflowed = True
            self._chunks.clear()
            return
        self._chunks.append(chunk)

    def data(self) -> bytes:
        return b"".join(self._chunks)


class _TailBuffer:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._data += chunk
        if len(self._data) > 2 * self._limit:
            del self._data[: -self._limit]

    def text(self) -> str:
        return bytes(self._data[-self._limit :]).decode("utf-8", "replace").strip()


def skill_env(base: Mapping[str, str], *, work_dir: Path, output_dir: Path) -> dict[str, str]:
    """The environment skills see: ``base`` plus ``SANDSTREAM_WORK_DIR``/``_OUTPUT_DIR``."""
    env = dict(base)
    env["SANDSTREAM_WORK_DIR"] = os.fspath(work_dir)
    env["SANDSTREAM_OUTPUT_DIR"] = os.fspath(output_dir)
    return env
