"""Strict JSON: the one way rewardbox writes (and reads back) JSON and JSONL.

Policy (``docs/json_policy.md``): everything rewardbox writes as JSON -- JSONL
exports such as ``DecodeResult`` rows, ``training_metrics.json``, checkpoint
markers, benchmark results, tool outputs, hash inputs -- is strict RFC 8259
JSON. A non-finite float (``NaN``, ``Infinity``, ``-Infinity``) has no JSON
spelling, so it is written as ``null``: the row is kept, every other field is
unchanged, and ``null`` already means "no value" to every reader. The encoder
then runs with ``allow_nan=False``, so nothing non-finite can slip through a
``default=`` hook either. Reading is strict as well: ``loads`` rejects the
``NaN``/``Infinity`` literals Python's ``json`` accepts by default.

Every module calls :func:`dumps` (or :func:`write_json` / :func:`write_jsonl`)
instead of ``json.dumps``; ``tests/test_strict_json.py`` checks the tree for
stray ``json.dump`` calls.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any


def to_strict(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (recursively).

    Dicts keep their keys, lists and tuples become lists, other integers (NumPy)
    become ``int`` and other real numbers (NumPy floats) ``float``. Any other
    object is returned as is (a ``default=`` hook may encode it).
    """
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, Mapping):
        return {key: to_strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_strict(item) for item in value]
    return value


def non_finite_paths(value: Any, path: str = "$") -> list[str]:
    """Where ``value`` holds non-finite floats, as JSONPath-like strings (``$.rows[2].reward``)."""
    if isinstance(value, (str, bool, int)) or value is None:
        return []
    if isinstance(value, numbers.Real):
        return [] if math.isfinite(float(value)) else [path]
    if isinstance(value, Mapping):
        return [p for key, item in value.items() for p in non_finite_paths(item, f"{path}.{key}")]
    if isinstance(value, (list, tuple)):
        return [p for i, item in enumerate(value) for p in non_finite_paths(item, f"{path}[{i}]")]
    return []


def dumps(value: Any, *, default: Callable[[Any], Any] | None = None, **kwargs: Any) -> str:
    """``json.dumps`` under the strict policy: non-finite floats -> ``null``, ``allow_nan=False``.

    Args:
        value: any JSON-able value.
        default: as ``json.dumps``; what it returns is made strict too.
        **kwargs: passed to ``json.dumps`` (``indent``, ``sort_keys``, ``ensure_ascii``, ...).

    Raises:
        TypeError: an object neither JSON-able nor handled by ``default``.
    """
    hook = None if default is None else (lambda obj: to_strict(default(obj)))
    try:  # fast path: the C encoder, no walk over the value, when it holds nothing to replace
        return json.dumps(value, default=hook, allow_nan=False, **kwargs)
    except (ValueError, TypeError):
        return json.dumps(to_strict(value), default=hook, allow_nan=False, **kwargs)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (strict JSON has no NaN or Infinity)")


STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
"""A decoder that rejects ``NaN``/``Infinity``/``-Infinity``; use ``.decode`` or ``.raw_decode``."""


def loads(text: str) -> Any:
    """``json.loads`` that rejects ``NaN``/``Infinity`` literals (``ValueError``, like any invalid JSON)."""
    return STRICT_DECODER.decode(text)


def write_json(path: str | Path, value: Any, **kwargs: Any) -> Path:
    """Write ``value`` as strict JSON (``indent=2`` unless given) to ``path`` atomically.

    The text goes to ``<path>.tmp`` first and replaces ``path`` in one rename, so
    a crash never leaves a half-written file. Returns the path.
    """
    path = Path(path)
    kwargs.setdefault("indent", 2)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(value, **kwargs) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_jsonl(
    path: str | Path, rows: Iterable[Any], *, append: bool = False, **kwargs: Any
) -> int:
    """Write one strict JSON value per line (UTF-8, non-ASCII kept); returns the number of rows written."""
    kwargs.setdefault("ensure_ascii", False)
    count = 0
    with open(path, "a" if append else "w", encoding="utf-8") as out:
        for row in rows:
            out.write(dumps(row, **kwargs) + "\n")
            count += 1
    return count
