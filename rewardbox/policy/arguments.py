"""Typing tool-call arguments from the tool's JSON schema.

Models write arguments loosely: ``"10"`` for an integer, ``10001`` for a zip
code string, a JSON object serialised into a string. This module turns a
decoded arguments value into the dict the tool expects, or explains, in one
line the model can read, why it cannot. It is the only place argument types
are decided, so training and evaluation agree (docs/method.md, "Parser parity").

Coercions (and nothing else):
    integer <- integral float (``3.0``) or integer literal string (``"10"``)
    number  <- numeric literal string (``"1.5"``, ``"10"``)
    string  <- integer or number (``10001`` -> ``"10001"``), never a boolean
    boolean <- ``"true"`` / ``"false"`` (any case)
    array, object <- a string holding JSON of that type
"""

from __future__ import annotations

import math
import re
from typing import Any

from rewardbox import strict_json

_INT_RE = re.compile(r"\s*[+-]?\d+\s*")
_NUM_RE = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


class ArgumentError(ValueError):
    """Arguments that cannot be typed; ``str(err)`` is shown to the model."""


def json_type_name(value: Any) -> str:
    """The JSON type name of a decoded value (``"array"`` for a list, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def type_arguments(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Type a decoded arguments object against a tool's input schema.

    Args:
        arguments: the decoded ``arguments`` object, keys in the model's order.
        schema: the tool's JSON schema (``{"type": "object", "properties": ...}``);
            ``$ref`` already dereferenced (docs/thinkingbox.md, "Servers").

    Returns:
        A new dict with every known property typed. An argument the tool does not declare is an
        error when the tool declares its properties (``additionalProperties`` absent counts as
        false at the top level, as in the strict schemas sent to endpoints: a tool server would
        drop it silently); inside nested objects JSON Schema's default (allowed) holds.

    Raises:
        ArgumentError: a missing required argument, an unexpected one, or a
            value that cannot be typed. A policy failure, never a system error.
    """
    schema = schema or {}
    return _type_object(arguments, schema, path="", default_extra=not schema.get("properties"))


def _type_object(
    value: dict[str, Any], schema: dict[str, Any], path: str, default_extra: bool = True
) -> dict[str, Any]:
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties", default_extra)
    out: dict[str, Any] = {}
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key in props:
            out[key] = _type_value(item, props[key], where)
        elif extra is False:
            declared = ", ".join(props) or "none"
            raise ArgumentError(f"unexpected argument '{where}' (declared: {declared})")
        elif isinstance(extra, dict):
            out[key] = _type_value(item, extra, where)
        else:
            out[key] = item
    for key in schema.get("required") or []:
        if key not in value:
            where = f"{path}.{key}" if path else key
            raise ArgumentError(f"missing required argument '{where}'")
    return out


def _type_value(value: Any, schema: Any, path: str) -> Any:
    if not isinstance(schema, dict) or not schema:
        return value
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return _type_union(value, schema, key, path)
    types = _declared_types(schema)
    typed = _match_exact(value, types, schema, path)
    if typed is _NO_MATCH:
        typed = _coerce(value, types, schema, path)
    _check_enum(typed, schema, path)
    return typed


def _type_union(value: Any, schema: dict[str, Any], key: str, path: str) -> Any:
    base = {k: v for k, v in schema.items() if k != key}
    options = [{**base, **sub} for sub in schema[key] if isinstance(sub, dict)]
    for option in options:  # exact matches first, so "10" stays a string under string|integer
        if _match_exact(value, _declared_types(option), option, path) is not _NO_MATCH:
            return _type_value(value, option, path)
    for option in options:
        try:
            return _type_value(value, option, path)
        except ArgumentError:
            continue
    raise ArgumentError(
        f"'{path}': {json_type_name(value)} {_short(value)} matches none of the allowed types"
    )


def _declared_types(schema: dict[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    if "properties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    return []


class _NoMatch:
    pass


_NO_MATCH = _NoMatch()


def _match_exact(value: Any, types: list[str], schema: dict[str, Any], path: str) -> Any:
    if not types:
        return value
    for t in types:
        if t == "null" and value is None:
            return None
        if t == "string" and isinstance(value, str):
            return value
        if t == "boolean" and isinstance(value, bool):
            return value
        if t == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return value
        if t == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                continue
            return value
        if t == "array" and isinstance(value, list):
            return _type_array(value, schema, path)
        if t == "object" and isinstance(value, dict):
            return _type_object(value, schema, path)
    return _NO_MATCH


def _coerce(value: Any, types: list[str], schema: dict[str, Any], path: str) -> Any:
    for t in types:
        converted = _convert(value, t)
        if converted is not _NO_MATCH:
            typed = _match_exact(converted, [t], schema, path)
            if typed is not _NO_MATCH:
                return typed
    wanted = " or ".join(types)
    raise ArgumentError(f"'{path}': expected {wanted}, got {json_type_name(value)} {_short(value)}")


def _convert(value: Any, target: str) -> Any:
    if isinstance(value, bool) and target != "boolean":
        return _NO_MATCH
    if target == "integer":
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        if isinstance(value, str) and _INT_RE.fullmatch(value):
            return int(value)
    elif target == "number" and isinstance(value, str) and _NUM_RE.fullmatch(value):
        return int(value) if _INT_RE.fullmatch(value) else float(value)
    elif target == "string" and isinstance(value, (int, float)) and math.isfinite(value):
        return str(value)
    elif (
        target == "boolean"
        and isinstance(value, str)
        and value.strip().lower() in ("true", "false")
    ):
        return value.strip().lower() == "true"
    elif target in ("array", "object") and isinstance(value, str):
        try:
            decoded = strict_json.loads(value)
        except ValueError:
            return _NO_MATCH
        if json_type_name(decoded) == target:
            return decoded
    return _NO_MATCH


def _type_array(value: list[Any], schema: dict[str, Any], path: str) -> list[Any]:
    items = schema.get("items")
    if not isinstance(items, dict):
        return list(value)
    return [_type_value(item, items, f"{path}[{i}]") for i, item in enumerate(value)]


def _check_enum(value: Any, schema: dict[str, Any], path: str) -> None:
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(strict_json.dumps(v) for v in schema["enum"])
        raise ArgumentError(f"'{path}': {_short(value)} is not one of {allowed}")
    if "const" in schema and value != schema["const"]:
        raise ArgumentError(f"'{path}': must be {strict_json.dumps(schema['const'])}")


def _short(value: Any, limit: int = 60) -> str:
    text = strict_json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
