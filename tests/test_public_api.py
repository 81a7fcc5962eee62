"""The public API of docs/api.md: every name imports from its documented path with its documented signature."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"

PUBLIC_API = {
    "rewardbox.selection.assign_band",
    "rewardbox.selection.task_difficulty",
    "rewardbox.selection.training_pool",
    "rewardbox.metrics.pass_at_k",
    "rewardbox.metrics.pass_hat_k",
    "rewardbox.training.group_advantages",
    "rewardbox.policy.interpreter.interpret",
    "rewardbox.tasks.thinkingbox.load_dataset",
    "rewardbox.tasks.exclusion.exclude_overlap",
    "rewardbox.config.profile.load_profile",
    "rewardbox.sandbox.base.ToolSpec",
}
"""The stable names; a change here is a change of the public API (and of docs/api.md)."""

_SECTION = re.compile(r"^### `(rewardbox\.[\w.]+)`\n+```python\n(.+?)\n```", re.MULTILINE)


def documented() -> dict[str, str]:
    """``{dotted name: signature line}`` of every ``### `name``` heading of docs/api.md."""
    return dict(_SECTION.findall(DOC.read_text(encoding="utf-8")))


def resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "([{<"
        depth -= char in ")]}>"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p.strip() for p in parts + [current] if p.strip()]


def documented_parameters(signature_line: str) -> list[str]:
    """Parameter names of ``name(a, b=1, *, c) -> T``, with ``*`` where keyword-only ones start."""
    inside = signature_line[signature_line.index("(") + 1 : signature_line.rindex(")")]
    return [re.split(r"[=:]", part, maxsplit=1)[0].strip() for part in _split_top_level(inside)]


def code_parameters(obj) -> list[str]:
    names, star = [], False
    for param in inspect.signature(obj).parameters.values():
        if param.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            names.append("*")
            star = True
        names.append(param.name)
    return names


def test_the_doc_lists_exactly_the_tested_names():
    assert set(documented()) == PUBLIC_API


def test_documented_parameters_parser():
    assert documented_parameters("f(a, b=(1, 2), *, c: dict[str, int] = {}) -> x") == [
        "a",
        "b",
        "*",
        "c",
    ]


@pytest.mark.parametrize("dotted", sorted(PUBLIC_API))
def test_name_imports_from_its_path_and_its_package(dotted):
    obj = resolve(dotted)
    package = ".".join(dotted.split(".")[:2])
    assert getattr(importlib.import_module(package), dotted.rpartition(".")[2]) is obj
    assert inspect.getdoc(obj), f"{dotted} has no docstring"


@pytest.mark.parametrize("dotted", sorted(PUBLIC_API))
def test_documented_signature_matches_the_code(dotted):
    line = documented()[dotted]
    assert line.startswith(dotted.rpartition(".")[2] + "("), line
    assert documented_parameters(line) == code_parameters(resolve(dotted))
