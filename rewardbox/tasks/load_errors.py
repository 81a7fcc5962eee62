"""Load errors that name the file and the line: YAML marks and Python syntax errors.

Every loader of task files (ThinkingBox ``.py`` test files, YAML test files,
agent/scenario/conftest configs, test lists) turns a parser's exception into a
:class:`~rewardbox.errors.TaskFormatError` through these helpers, so the
message always reads ``<file>:<line>: <what is wrong>`` with the line counted
in the file itself (not inside an embedded YAML block).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rewardbox.errors import TaskFormatError


def yaml_error(path: str | Path, exc: yaml.YAMLError, first_line: int = 1) -> TaskFormatError:
    """A YAML parse error as a TaskFormatError at the file line of its problem mark.

    Args:
        path: the file holding the YAML.
        exc: the error from ``yaml.safe_load`` / ``yaml.compose``.
        first_line: the file line (1-based) of the YAML text's first line; a
            ``"!"`` block inside a Python file starts at its string's line.

    Returns:
        The error; its message is the parser's problem and context without the
        parser's own ``"<unicode string>", line N`` positions, which count from
        the start of the YAML text rather than the file.
    """
    context_mark = getattr(exc, "context_mark", None)
    mark = getattr(exc, "problem_mark", None) or context_mark
    line = first_line + mark.line if mark is not None else None
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if context and context_mark is not None and context_mark.line != getattr(mark, "line", None):
        context = f"{context} (opened on line {first_line + context_mark.line})"
    parts = [p for p in (context, problem) if p]
    detail = "; ".join(parts) if parts else str(exc).splitlines()[0]
    column = f" (column {mark.column + 1})" if mark is not None else ""
    return TaskFormatError(str(path), f"invalid YAML: {detail}{column}", line=line)


def syntax_error(path: str | Path, exc: SyntaxError) -> TaskFormatError:
    """A SyntaxError as a TaskFormatError naming the file, line, column and the offending text."""
    column = f", column {exc.offset}" if exc.offset else ""
    text = (exc.text or "").strip()
    shown = f": {text[:200]!r}" if text else ""
    return TaskFormatError(
        str(path), f"not valid Python ({exc.msg}{column}){shown}", line=exc.lineno
    )
