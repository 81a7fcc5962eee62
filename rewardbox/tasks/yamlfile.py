"""Parse YAML test files (``test_case/**/*.yaml``, docs/thinkingbox.md, "Dataset layout").

Two shapes are accepted; a file uses one or both.

1. **Upstream ``TestCaseFile``**: ``test_cases: [{uid, scenario, query,
   test_code, ...}]``. ``uid`` (or ``name``) is the test name; ``test_code`` is
   Python that defines the test function. If it does not bind
   ``__tb_test_fn`` itself, the function named like the test is bound.
2. **Declarative tests** (ours, for people who do not want to write Python):
   top-level keys from ``CONFIG_FIELDS`` are defaults for every entry of
   ``tests: [{name, ...config, validate?}]``. ``validate`` lists checks, run in
   order, and defaults to ``[database]``:

   - ``database``: on every server in ``x.effects``, ``result_db_hash ==
     golden_db_hash``; the failure message lists ``diff``; a ``golden_error``
     is an invalid task (a permanent system error, never a 0).
     ``{database: [server, ...]}`` names the servers.
   - ``rubrics_yesno``: ``judge.text_yesno(x.response, q)`` for each ``q`` in
     ``effects[server]["rubrics_yesno"]`` of the servers that have it;
     ``{rubrics_yesno: [question, ...]}`` gives the questions inline.
   - ``{response_contains: text}``: the last reply *states* ``text`` by the one
     text rule of the reward (case-insensitive, word boundaries, numbers as
     numbers, negated mentions do not count).

   Each check is a call into ``rewardbox.grading.reward``, the rule that
   generated Python test files call too; the code imports
   ``thinkingbox.common``, so it runs in the same worker as Python tests.
   Missing effects keys raise ``KeyError``: a system error, never a pass.
"""

from __future__ import annotations

import keyword
from pathlib import Path
from typing import Any

import yaml

from rewardbox.errors import TaskFormatError
from rewardbox.tasks.load_errors import yaml_error
from rewardbox.tasks.pyfile import CONFIG_FIELDS, TEST_FN_BINDING, RawTestCase, merge_config

UPSTREAM_ENTRY_KEYS = frozenset(CONFIG_FIELDS) | {"uid", "name", "test_code", "metadata"}
DECLARATIVE_ENTRY_KEYS = frozenset(CONFIG_FIELDS) | {"name", "validate"}
FILE_KEYS = frozenset(CONFIG_FIELDS) | {"tests", "test_cases"}

_CHECKS_SOURCE = """\

from thinkingbox.common import Judge, TestContext

from rewardbox.grading.reward import validate_database, validate_response, validate_rubrics_yesno
"""
"""The head of a declarative test's code: the checks come from the reward module, never a copy."""


def parse_yaml_test_file(
    path: Path, text: str | None = None
) -> tuple[list[RawTestCase], list[TaskFormatError]]:
    """Parse one YAML test file; a broken entry is reported, the others load.

    Returns:
        ``(tests, errors)`` in file order. Each error names the file, the
        entry's line and the offending key.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8") if text is None else text
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        return [], [yaml_error(path, exc)]
    if root is None:
        return [], []
    if not isinstance(root, yaml.MappingNode):
        return [], [
            TaskFormatError(
                str(path), "a YAML test file must be a mapping", line=root.start_mark.line + 1
            )
        ]
    try:
        _check_keys(root, FILE_KEYS, path)
    except TaskFormatError as exc:
        return [], [exc]
    top = _construct(root)
    defaults = {k: v for k, v in top.items() if k in CONFIG_FIELDS}
    tests: list[RawTestCase] = []
    errors: list[TaskFormatError] = []
    for section, build in (("test_cases", _upstream_entry), ("tests", _declarative_entry)):
        for node in _entries(root, section, path, errors):
            try:
                tests.append(build(node, defaults, path))
            except TaskFormatError as exc:
                errors.append(exc)
    tests.sort(key=lambda t: t.lineno)
    return tests, errors


def _construct(node: yaml.Node) -> Any:
    return yaml.SafeLoader("").construct_document(node)


def _check_keys(node: yaml.MappingNode, allowed: frozenset[str], path: Path) -> None:
    for key_node, _ in node.value:
        if key_node.value not in allowed:
            raise TaskFormatError(
                str(path),
                f"unknown key {key_node.value!r}; allowed: {', '.join(sorted(allowed))}",
                line=key_node.start_mark.line + 1,
                field=key_node.value,
            )


def _entries(
    root: yaml.MappingNode, section: str, path: Path, errors: list[TaskFormatError]
) -> list[yaml.Node]:
    for key_node, value in root.value:
        if key_node.value != section:
            continue
        if not isinstance(value, yaml.SequenceNode):
            errors.append(
                TaskFormatError(
                    str(path), "must be a list", line=value.start_mark.line + 1, field=section
                )
            )
            return []
        return list(value.value)
    return []


def _entry_name(entry: dict[str, Any], keys: tuple[str, ...], line: int, path: Path) -> str:
    name = next((entry[k] for k in keys if entry.get(k)), None)
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise TaskFormatError(
            str(path),
            f"test name must be a Python identifier, got {name!r}",
            line=line,
            field=keys[0],
        )
    return name


def _entry_mapping(
    node: yaml.Node, allowed: frozenset[str], path: Path
) -> tuple[dict[str, Any], int]:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode):
        raise TaskFormatError(str(path), "each test entry must be a mapping", line=line)
    _check_keys(node, allowed, path)
    return _construct(node), line


def _upstream_entry(node: yaml.Node, defaults: dict[str, Any], path: Path) -> RawTestCase:
    entry, line = _entry_mapping(node, UPSTREAM_ENTRY_KEYS, path)
    name = _entry_name(entry, ("uid", "name"), line, path)
    code = entry.get("test_code")
    if not isinstance(code, str) or not code.strip():
        raise TaskFormatError(
            str(path), "test_code must be non-empty Python", line=line, field="test_code"
        )
    if TEST_FN_BINDING not in code:
        if f"def {name}(" not in code:
            raise TaskFormatError(
                str(path),
                f"test_code neither binds {TEST_FN_BINDING} nor defines {name}()",
                line=line,
                field="test_code",
            )
        code = f"{code.rstrip()}\n{TEST_FN_BINDING} = {name}\n"
    config = merge_config(defaults, {k: v for k, v in entry.items() if k in CONFIG_FIELDS})
    extra = {"metadata": entry.get("metadata") or {}}
    return RawTestCase(
        name=name, config=config, test_code=code, path=path, lineno=line, extra=extra
    )


def _declarative_entry(node: yaml.Node, defaults: dict[str, Any], path: Path) -> RawTestCase:
    entry, line = _entry_mapping(node, DECLARATIVE_ENTRY_KEYS, path)
    name = _entry_name(entry, ("name",), line, path)
    calls = [_check_call(item, path, line) for item in entry.get("validate") or ["database"]]
    body = "\n".join(f"    {c}" for c in calls)
    code = f"{_CHECKS_SOURCE}\n\ndef {name}(x: TestContext, judge: Judge):\n{body}\n\n\n{TEST_FN_BINDING} = {name}\n"
    config = merge_config(defaults, {k: v for k, v in entry.items() if k in CONFIG_FIELDS})
    return RawTestCase(name=name, config=config, test_code=code, path=path, lineno=line)


def _check_call(item: Any, path: Path, line: int) -> str:
    """One ``validate`` item as a Python call line (arguments via ``repr``)."""
    if item == "database":
        return "validate_database(x)"
    if item == "rubrics_yesno":
        return "validate_rubrics_yesno(x, judge)"
    if isinstance(item, dict) and len(item) == 1:
        ((kind, arg),) = item.items()
        if kind == "database" and _is_str_list(arg):
            return f"validate_database(x, {list(arg)!r})"
        if kind == "rubrics_yesno" and _is_str_list(arg):
            return f"validate_rubrics_yesno(x, judge, {list(arg)!r})"
        if kind == "response_contains" and isinstance(arg, str) and arg.strip():
            return f"validate_response(x, expect=[{arg!r}])"
    raise TaskFormatError(
        str(path),
        f"unknown validate item {item!r}; use database, rubrics_yesno, {{database: [servers]}}, "
        "{rubrics_yesno: [questions]} or {response_contains: text} (non-empty text)",
        line=line,
        field="validate",
    )


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
