"""Test lists and benchmark exclusion (docs/thinkingbox.md, "Test lists" and "Task identity").

A test list is a YAML list of ``"file.py:test_name"`` uids. Benchmark tasks
and evaluation-only releases (e.g. ThinkingBox-Bench v1.0) must never enter a
training pool: candidates are excluded when they share a uid **or** an identity
(``Task.content_hash()``: query, user context, starting data and golden
actions; grading-only keys such as ``rubrics_yesno`` are ignored) with any of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from rewardbox.errors import TaskFormatError
from rewardbox.tasks.load_errors import yaml_error
from rewardbox.tasks.schema import Task


def parse_uid(uid: str) -> tuple[str, str]:
    """Split ``"file.py:test_name"`` into ``(file name, test name)``.

    Raises:
        ValueError: not exactly one ``:``, or an empty part.
    """
    parts = uid.split(":")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise ValueError(f"invalid test uid {uid!r}: expected 'file.py:test_name'")
    return parts[0], parts[1]


def load_test_list(path: str | Path) -> list[str]:
    """Read a test list file: a YAML list of ``"file.py:test_name"`` strings.

    Args:
        path: the YAML file.

    Returns:
        The uids in file order (order is kept downstream).

    Raises:
        TaskFormatError: not a list, a non-string or malformed entry, or a
            duplicate entry; the error names the file, the line and the entry.
    """
    path = Path(path)
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise yaml_error(path, exc) from exc
    if root is None:
        return []
    if not isinstance(root, yaml.SequenceNode):
        raise TaskFormatError(
            str(path), "a test list must be a YAML list of 'file.py:test_name'", line=1
        )
    uids: list[str] = []
    seen: set[str] = set()
    for node in root.value:
        line = node.start_mark.line + 1
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
            raise TaskFormatError(
                str(path), "each entry must be a string 'file.py:test_name'", line=line, field="uid"
            )
        try:
            parse_uid(node.value)
        except ValueError as exc:
            raise TaskFormatError(str(path), str(exc), line=line, field="uid") from exc
        if node.value in seen:
            raise TaskFormatError(
                str(path), f"duplicate entry {node.value!r}", line=line, field="uid"
            )
        seen.add(node.value)
        uids.append(node.value)
    return uids


def write_test_list(path: str | Path, uids: Sequence[str]) -> Path:
    """Write ``uids`` as a test list that :func:`load_test_list` reads back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(list(uids), default_flow_style=False, allow_unicode=True), encoding="utf-8"
    )
    return path


def _benchmark_keys(benchmark: Iterable[Task | str]) -> tuple[set[str], dict[str, str]]:
    """``(uids, {content hash: benchmark uid})``; plain strings are uids only."""
    uids: set[str] = set()
    hashes: dict[str, str] = {}
    for item in benchmark:
        if isinstance(item, str):
            uids.add(item)
        else:
            uids.add(item.uid)
            hashes.setdefault(item.content_hash(), item.uid)
    return uids, hashes


def overlap_reason(task: Task, uids: set[str], hashes: dict[str, str]) -> str | None:
    """Why ``task`` overlaps the benchmark keys, or None when it does not."""
    if task.uid in uids:
        return f"{task.uid}: uid is a benchmark uid"
    other = hashes.get(task.content_hash())
    if other is not None:
        return f"{task.uid}: same task (query, user context, starting data, golden actions) as benchmark task {other}"
    return None


def exclude_overlap(
    candidates: Iterable[Task], benchmark: Iterable[Task | str]
) -> tuple[list[Task], list[Task]]:
    """Drop every candidate that shares a uid or a content hash with the benchmark.

    Args:
        candidates: the tasks that may enter a training pool.
        benchmark: benchmark tasks, or bare uids (a uid list without the tasks
            excludes by uid only).

    Returns:
        ``(kept, excluded)``, each in input order. An empty benchmark keeps all.
        Identity is ``Task.content_hash()`` (docs/thinkingbox.md, "Task identity").

    Never raises for overlap (an overlap is a result, not an error); the caller's
    blocking check (``check_disjoint``) fails a pool that still overlaps.
    """
    uids, hashes = _benchmark_keys(benchmark)
    kept: list[Task] = []
    excluded: list[Task] = []
    for task in candidates:
        (excluded if overlap_reason(task, uids, hashes) else kept).append(task)
    return kept, excluded


def check_disjoint(candidates: Iterable[Task], benchmark: Iterable[Task | str] = ()) -> list[str]:
    """Every task of a training set that must not train, one line each: the one leak check.

    A task leaks when its ``split`` is not ``"candidate"`` (a benchmark task that reached a
    training set), or when it shares a uid or a task identity (content hash) with a
    ``benchmark`` task. The blocking benchmark-overlap check, the screened-candidates check
    and the GRPO stage's guard all call it.

    Args:
        candidates: a training set (candidates, screened candidates, a training pool).
        benchmark: held-out tasks, or bare uids (uid clashes only); empty checks splits only.

    Returns:
        Problems (a wrong split, or a uid or content-hash clash naming both tasks), in
        input order; an empty list means no leak.
    """
    uids, hashes = _benchmark_keys(benchmark)
    problems = []
    for task in candidates:
        reason = overlap_reason(task, uids, hashes)
        if task.split != "candidate":
            problems.append(f"{task.uid}: split is {task.split!r}, not 'candidate'")
        elif reason:
            problems.append(reason)
    return problems
