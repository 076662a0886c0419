"""A small JSON Schema validator for skill arguments (no third-party dependency).

Supports the keywords skill manifests use: ``type`` (one or a list), ``properties``,
``required``, ``additionalProperties`` (boolean or schema), ``items``, ``enum``,
``const``, ``minimum``/``maximum``, ``minLength``/``maxLength``, ``minItems``/
``maxItems``. Unknown keywords are ignored, so any schema is accepted; validation
is only as strict as the keywords above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["validate"]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
    "number": (int, float),
    "integer": (int,),
}


def validate(instance: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Return the validation errors of ``instance`` against ``schema`` (empty if valid).

    Each error names the JSON path it applies to, e.g. ``$.path: expected string``.
    """
    errors: list[str] = []
    _check(instance, schema, path, errors)
    return errors


def _is_type(value: Any, name: str) -> bool:
    kinds = _TYPES.get(name)
    if kinds is None:
        return True
    if isinstance(value, bool) and name in ("number", "integer"):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, kinds)


def _check(value: Any, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    if not isinstance(schema, Mapping):
        return
    wanted = schema.get("type")
    if wanted is not None:
        names = wanted if isinstance(wanted, list) else [wanted]
        if not any(_is_type(value, str(name)) for name in names):
            errors.append(f"{path}: expected {' or '.join(map(str, names))}")
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: must be one of {schema['enum']!r}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: must be {schema['const']!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, path, errors)
    if isinstance(value, str):
        _check_string(value, schema, path, errors)
    if isinstance(value, list):
        _check_array(value, schema, path, errors)
    if isinstance(value, dict):
        _check_object(value, schema, path, errors)


def _check_number(
    value: int | float, schema: Mapping[str, Any], path: str, errors: list[str]
) -> None:
    """``minimum`` and ``maximum``."""
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: must be >= {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{path}: must be <= {schema['maximum']}")


def _check_string(value: str, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    """``minLength`` and ``maxLength``."""
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")


def _check_array(value: list[Any], schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    """``minItems``, ``maxItems`` and each item against ``items``."""
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{path}: fewer than {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: more than {schema['maxItems']} items")
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            _check(item, items, f"{path}[{index}]", errors)


def _check_object(
    value: dict[str, Any], schema: Mapping[str, Any], path: str, errors: list[str]
) -> None:
    for name in schema.get("required", ()):
        if name not in value:
            errors.append(f"{path}: missing required property {name!r}")
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        properties = {}
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            _check(item, properties[name], f"{path}.{name}", errors)
        elif extra is False:
            errors.append(f"{path}: unexpected property {name!r}")
        elif isinstance(extra, Mapping):
            _check(item, extra, f"{path}.{name}", errors)
