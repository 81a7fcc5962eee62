"""Parse ThinkingBox Python test files (docs/thinkingbox.md, "Test files").

A test file is ordinary Python. Module-level string expressions that start
with ``"!"`` are YAML defaults; a top-level ``def`` whose first body statement
is such a string is a test case, every other function is a helper. Parsing
uses :mod:`ast` only: the file is never imported or executed here.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rewardbox.errors import TaskFormatError
from rewardbox.grading.outcome import (
    TEST_FN_BINDING,  # the grader owns the name; the loaders write it
)
from rewardbox.tasks.load_errors import syntax_error, yaml_error

# Keys a test's YAML block may hold (docs/thinkingbox.md, "Test files").
CONFIG_FIELDS = (
    "scenario",
    "query",
    "user_context",
    "max_user_sim_turns",
    "max_agent_sim_turns",
    "bot_instructions",
    "history",
    "init",
    "format_query",
    "tags",
)


@dataclass
class RawTestCase:
    """One test case before hydration: its name, YAML config and test code.

    Attributes:
        name: the test function name (the part after ``:`` in the uid).
        config: merged YAML config, keys from :data:`CONFIG_FIELDS` only.
        test_code: the file with every other test blanked, plus the binding line.
        path: the file it came from; lineno: the ``def`` (or entry) line, 1-based.
    """

    name: str
    config: dict[str, Any]
    test_code: str
    path: Path
    lineno: int
    extra: dict[str, Any] = field(default_factory=dict)


def bang_yaml(text: str) -> str | None:
    """The YAML text of a ``"!"`` string, or None if the string is not one."""
    if not text.startswith("!"):
        return None
    return textwrap.dedent(text[1:])


def load_bang_yaml(node: ast.Expr, path: Path) -> dict[str, Any] | None:
    """Parse the ``"!"`` string of ``node``; None if it is an ordinary string.

    Raises:
        TaskFormatError: bad YAML, or YAML that is not a mapping (names the line).
    """
    text = bang_yaml(node.value.value)
    if text is None:
        return None
    try:
        obj = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise yaml_error(path, exc, first_line=node.lineno) from exc
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise TaskFormatError(
            str(path), f"YAML block must be a mapping, got {type(obj).__name__}", line=node.lineno
        )
    return obj


def check_config_keys(obj: dict[str, Any], node: ast.Expr, path: Path) -> None:
    """Raise a TaskFormatError naming the first key not in :data:`CONFIG_FIELDS`.

    The error's line is the key's own line in the file (the string's first
    line plus the key's offset inside the YAML text).
    """
    for key in obj:
        if key in CONFIG_FIELDS:
            continue
        line = node.lineno + _key_offset(bang_yaml(node.value.value) or "", key)
        raise TaskFormatError(
            str(path),
            f"unknown test config key {key!r}; allowed: {', '.join(CONFIG_FIELDS)}",
            line=line,
            field=key,
        )


def _key_offset(text: str, key: str) -> int:
    """0-based line of top-level ``key`` inside YAML ``text`` (0 if not found)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return 0
    for key_node, _ in getattr(root, "value", []):
        if getattr(key_node, "value", None) == key:
            return key_node.start_mark.line
    return 0


def merge_config(defaults: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """``{**defaults, **own}`` with ``tags`` lists concatenated (defaults first)."""
    merged = {**defaults, **own}
    if isinstance(defaults.get("tags"), list) and isinstance(own.get("tags"), list):
        merged["tags"] = defaults["tags"] + own["tags"]
    return merged


def _is_string_expr(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _first_line(node: ast.FunctionDef) -> int:
    """First line of a function including its decorators."""
    return min([node.lineno] + [d.lineno for d in node.decorator_list])


def parse_python_test_file(
    path: Path, code: str | None = None
) -> tuple[list[RawTestCase], list[TaskFormatError]]:
    """Parse one Python test file into raw test cases (docs/thinkingbox.md, "Test files").

    Defaults are merged in file order: a test sees the defaults defined above
    it (the same as the upstream parser). A broken test is reported and the
    file's other tests still load; a file that is not valid Python, or whose
    module-level defaults block is broken (every test below it would load with
    the wrong config), yields no tests and one error naming the line.

    Args:
        path: the file (used in errors and read if ``code`` is None).
        code: the source text, if already read.

    Returns:
        ``(tests, errors)``; tests in file order.
    """
    path = Path(path)
    code = path.read_text(encoding="utf-8") if code is None else code
    try:
        tree = ast.parse(code, filename=str(path))
    except SyntaxError as exc:
        return [], [syntax_error(path, exc)]
    defaults: dict[str, Any] = {}
    # Every test function, with its config (None when its YAML is broken:
    # reported, not loaded, but still blanked out of the other tests' code).
    found: list[tuple[ast.FunctionDef, dict[str, Any] | None]] = []
    errors: list[TaskFormatError] = []
    for node in tree.body:
        if _is_string_expr(node):
            try:
                defaults.update(load_bang_yaml(node, path) or {})
            except TaskFormatError as exc:
                # Every test below would load with wrong defaults: refuse the file, report the cause once.
                return [], [exc]
            continue
        try:
            if isinstance(node, ast.FunctionDef) and node.body and _is_string_expr(node.body[0]):
                if bang_yaml(node.body[0].value.value) is None:
                    continue  # a helper with an ordinary docstring
                found.append((node, None))
                own = load_bang_yaml(node.body[0], path) or {}
                check_config_keys(own, node.body[0], path)
                found[-1] = (node, merge_config(defaults, own))
        except TaskFormatError as exc:
            errors.append(exc)
    return _build_test_codes(code, found, path), errors


def _build_test_codes(
    code: str, found: list[tuple[ast.FunctionDef, dict[str, Any] | None]], path: Path
) -> list[RawTestCase]:
    """Blank every test function but one, keep line numbers, append the binding."""
    lines = code.split("\n")
    spans = [(_first_line(node), node.end_lineno or node.lineno) for node, _ in found]
    blank = list(lines)
    for start, end in spans:
        for i in range(start - 1, end):
            blank[i] = ""
    tests = []
    for (node, config), (start, end) in zip(found, spans):
        if config is None:
            continue
        body = blank[: start - 1] + lines[start - 1 : end] + blank[end:]
        test_code = "\n".join(body + [f"{TEST_FN_BINDING} = {node.name}", ""])
        tests.append(
            RawTestCase(
                name=node.name, config=config, test_code=test_code, path=path, lineno=node.lineno
            )
        )
    return tests
