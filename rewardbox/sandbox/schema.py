"""Tool input-schema cleaning, as the ThinkingBox session proxy does it (docs/thinkingbox.md, "Servers").

``$ref`` pointers into ``$defs`` (or ``definitions``) are inlined, ``$defs`` is
dropped, and the ``title`` keyword is removed at the top level and on every
property schema (recursively through nested properties, ``items``,
``additionalProperties`` and ``anyOf``/``oneOf``/``allOf``). A *property named*
``title`` is kept: only the schema keyword goes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

_DEF_KEYS = ("$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_SINGLE = ("items", "additionalProperties", "not")


def _resolve_ref(ref: str, defs: Mapping[str, Any]) -> tuple[str, Any] | None:
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix):
            name = ref[len(prefix) :]
            if name in defs:
                return name, defs[name]
    return None


def _deref(node: Any, defs: Mapping[str, Any], active: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_deref(item, defs, active) for item in node]
    if not isinstance(node, Mapping):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        found = _resolve_ref(ref, defs)
        if found is not None:
            name, target = found
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            if name in active:  # recursive model: stop with a permissive object
                return {"type": "object", **_deref(siblings, defs, active)}
            merged = {**_deref(target, defs, (*active, name)), **_deref(siblings, defs, active)}
            return merged
    return {k: _deref(v, defs, active) for k, v in node.items() if k not in _DEF_KEYS}


def _strip_titles(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    node.pop("title", None)
    props = node.get("properties")
    if isinstance(props, dict):
        for value in props.values():
            _strip_titles(value)
    for key in _SUBSCHEMA_SINGLE:
        if isinstance(node.get(key), dict):
            _strip_titles(node[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(node.get(key), list):
            for item in node[key]:
                _strip_titles(item)
    return node


def clean_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """A tool input schema ready for the agent.

    Args:
        schema: the MCP tool's ``inputSchema`` (not modified).

    Returns:
        A new dict: refs inlined, ``$defs`` gone, titles removed; an empty or
        missing schema becomes ``{"type": "object", "properties": {}}``.
    """
    if not schema:
        return {"type": "object", "properties": {}}
    defs: dict[str, Any] = {}
    for key in _DEF_KEYS:
        if isinstance(schema.get(key), Mapping):
            defs.update(schema[key])
    cleaned = _deref(copy.deepcopy(dict(schema)), defs, ())
    cleaned.setdefault("type", "object")
    if cleaned.get("type") == "object":
        cleaned.setdefault("properties", {})
    return _strip_titles(cleaned)
