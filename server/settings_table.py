"""Settings declared once: flag, type, default, environment variable, help and check.

A :class:`Setting` is one setting's whole declaration. On a settings dataclass it is
the field itself (``lock_lease: float = Setting(...).field()``): the field names it,
:func:`check_fields` (called by the dataclass's ``__post_init__``) runs its check, and
:func:`from_args` reads it from parsed flags. A setting that is no dataclass's field
(``--host``) is a module constant of its command. The commands' parsers add settings
with :func:`add_settings`, which writes each one's flag, its default (the environment
variable's value when it is set: a flag wins over its variable, and the variable over
the default) and its help, naming the variable and the default once; the flags' page,
docs/configuration.md, is rendered from those parsers.

Bad input: a value a setting's ``parse`` refuses, on the command line or in its
environment variable, is argparse's usage error naming the flag; a value its check
refuses raises the dataclass's error (:func:`check_fields`) with the check's message; a
``convert`` may raise :class:`ValueError` for what only the command line can give.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, cast

__all__ = [
    "Check",
    "Setting",
    "add_settings",
    "at_least",
    "check_fields",
    "finite_positive",
    "flags_of",
    "from_args",
    "positive",
    "settings_of",
]

T = TypeVar("T")
Check = Callable[[str, Any], str | None]
"""A setting's check: its name and a value (never ``None``) → what is wrong, or ``None``."""

_KEY = "sandstream.setting"
_SAME: Any = object()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
    """One setting. ``flag`` (``None``: no flag, a field with a check only), ``help``
    (what it does, without its default or variable), ``default`` (the flag's, and
    the field's unless :meth:`field` is told another), ``env`` (the variable that sets
    the default; blank counts as unset unless ``keep_blank``), ``parse`` (text → value,
    argparse's ``type``), ``metavar``, ``choices``, ``kind`` (``value``; ``switch``, a
    flag without a value, set by a variable that is neither blank nor ``0``;
    ``repeated``, a flag given again for each value, set by a comma-separated
    variable), ``shown`` (the default as help shows it, when its value does not say
    it), ``check`` (run on the field's value, :func:`check_fields`) and ``convert``
    (the flag's value → the field's, :func:`from_args`)."""

    flag: str | None = None
    help: str = ""
    default: Any = None
    env: str | None = None
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    kind: Literal["value", "switch", "repeated"] = "value"
    shown: str | None = None
    check: Check | None = None
    convert: Callable[[Any], Any] | None = None
    keep_blank: bool = False

    @property
    def dest(self) -> str:
        """The attribute of parsed flags that holds it (``--lock-lease``: ``lock_lease``)."""
        if self.flag is None:
            raise ValueError("a setting without a flag is never parsed")
        return self.flag.removeprefix("--").replace("-", "_")

    def field(self, *, default: Any = _SAME) -> Any:
        """The dataclass field that holds this setting, with :attr:`default` or
        ``default`` (``dataclasses.MISSING``: none, the field is required)."""
        value = self.default if default is _SAME else default
        return dataclasses.field(default=value, metadata={_KEY: self})

    def help_text(self) -> str:
        """The flag's help: what it does, then how it repeats, its variable and default."""
        notes = []
        if self.kind == "repeated":
            notes.append("repeatable")
        if self.env is not None:
            notes.append(
                f"${self.env}"
                + {"value": "", "switch": "=1", "repeated": ", comma-separated"}[self.kind]
            )
        shown = self.shown if self.shown is not None else _shown(self.default)
        if shown is not None:
            notes.append(f"default: {shown}")
        text = f"{self.help} ({'; '.join(notes)})" if notes else self.help
        return text.replace("%", "%%")

    def env_default(self, environ: Mapping[str, str]) -> Any:
        """The flag's default: its variable's value in ``environ`` (as text, which
        argparse parses), else :attr:`default`."""
        raw = None if self.env is None else environ.get(self.env)
        if raw is None or (raw == "" and not self.keep_blank):
            return [] if self.kind == "repeated" else self.default
        if self.kind == "switch":
            return raw not in ("", "0")
        if self.kind == "repeated":
            return [item for item in raw.split(",") if item.strip()]
        return raw


def _shown(default: Any) -> str | None:
    if default is None or isinstance(default, bool):
        return None
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def add_settings(
    group: argparse._ActionsContainer, settings: Iterable[Setting], environ: Mapping[str, str]
) -> None:
    """Add each setting's flag to ``group``, its default from ``environ``."""
    for setting in settings:
        if setting.flag is None:
            raise ValueError("a setting without a flag has no command line")
        options: dict[str, Any] = {
            "dest": setting.dest,
            "default": setting.env_default(environ),
            "help": setting.help_text(),
        }
        if setting.kind == "switch":
            group.add_argument(setting.flag, action="store_true", **options)
            continue
        if setting.kind == "repeated":
            options["action"] = "append"
        if setting.parse is not None:
            options["type"] = setting.parse
        if setting.metavar is not None:
            options["metavar"] = setting.metavar
        if setting.choices is not None:
            options["choices"] = setting.choices
        group.add_argument(setting.flag, **options)


def settings_of(cls: type[Any]) -> dict[str, Setting]:
    """The settings of dataclass ``cls``'s fields, by field name."""
    return {
        field.name: field.metadata[_KEY]
        for field in dataclasses.fields(cls)
        if _KEY in field.metadata
    }


def flags_of(cls: type[Any]) -> tuple[Setting, ...]:
    """The settings of dataclass ``cls``'s fields that are flags, in field order."""
    return tuple(setting for setting in settings_of(cls).values() if setting.flag is not None)


def from_args(cls: Callable[..., T], args: argparse.Namespace, **given: Any) -> T:
    """Dataclass ``cls`` from parsed ``args``: each field whose setting's flag was
    parsed (converted), then ``given``; other fields keep their defaults."""
    values: dict[str, Any] = {}
    for name, setting in settings_of(cast(type[Any], cls)).items():
        if setting.flag is None or not hasattr(args, setting.dest):
            continue
        value = getattr(args, setting.dest)
        values[name] = value if setting.convert is None else setting.convert(value)
    values.update(given)
    return cls(**values)


def check_fields(instance: object, error: Callable[[str], Exception]) -> None:
    """Run the check of each of ``instance``'s settings on its value (but ``None``);
    raise ``error(message)`` for the first one that fails."""
    for name, setting in settings_of(type(instance)).items():
        value = getattr(instance, name)
        if setting.check is not None and value is not None:
            problem = setting.check(name, value)
            if problem is not None:
                raise error(problem)


def finite_positive(name: str, value: float) -> str | None:
    """A finite number > 0."""
    if value > 0 and math.isfinite(value):
        return None
    return f"{name} must be a finite number > 0, got {value}"


def positive(name: str, value: float) -> str | None:
    """A number > 0, infinity included."""
    return None if value > 0 else f"{name} must be > 0, got {value}"


def at_least(minimum: int) -> Check:
    """A number >= ``minimum``."""

    def check(name: str, value: float) -> str | None:
        return None if value >= minimum else f"{name} must be >= {minimum}, got {value}"

    return check
