"""``tb infer`` JSONL (ThinkingBox ``DecodeResult`` rows) read as our trial rows.

Per line: the key is ``(uid, metadata.repetition)``; a *decode* system error
(``is_system_error: true``, ``metadata.error``) and a *test* system error
(``test_result.is_system_error: true``) both become a non-null ``system_error``
string, never a reward of 0 (docs/thinkingbox.md, "System errors in the
harness"). Our own extension keys (``metadata.rewardbox_*``) are read when
present; files written before the one-name-per-concept renames carry
``rewardbox_finish_reason`` and ``rewardbox_attempts``, read as well.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from rewardbox.episode.campaign import ROW_SCHEMA
from rewardbox.grading.tb_messages import count_agent_turns
from rewardbox.tasks.schema import Task

_REASON_KEYS = (
    "rewardbox_termination_reason",
    "rewardbox_finish_reason",
)  # today's key, then the old one
_TRIES_KEYS = ("rewardbox_tries", "rewardbox_attempts")
_GRADER_FALLBACK = "test raised a non-assertion exception"


class InterchangeError(ValueError):
    """A DecodeResult JSONL line is malformed; the message names the file, line and field."""

    def __init__(self, path: str | Path, line: int, message: str, field: str | None = None):
        detail = f" (field {field!r})" if field else ""
        super().__init__(f"{path}:{line}{detail}: {message}")
        self.path, self.line, self.field = str(path), line, field


def import_infer_results(
    path: str | os.PathLike, tasks: Sequence[Task] | None = None
) -> pl.DataFrame:
    """The imported rows of :func:`import_infer_report` (uids outside ``tasks`` are left out).

    Raises:
        InterchangeError: see :func:`import_infer_report`.
    """
    return import_infer_report(path, tasks)[0]


def import_infer_report(
    path: str | os.PathLike, tasks: Sequence[Task] | None = None
) -> tuple[pl.DataFrame, list[str]]:
    """Read a ``tb infer`` JSONL (``DecodeResult`` rows) as trial rows (``ROW_SCHEMA``).

    Per row: ``trial`` = ``metadata.repetition``; ``reward`` / ``passed`` from
    ``test_result``; ``system_error`` = ``"<error.type>: <error.message>"`` for a
    decode system error, ``"grader: <message>"`` for a test system error (the
    message is ``test_result.metadata.message`` or the traceback's last line), and
    ``"missing test_result: ..."`` when the test never ran (``tb agg`` counts that
    as a failed decoding too); ``turns`` = number of ``usage`` entries (agent
    completions); tokens summed over ``usage``; ``duration_s`` =
    ``metadata.execution_time``; ``tries`` = 1 (or ``metadata.rewardbox_tries``, formerly
    ``rewardbox_attempts``); ``termination_reason`` = ``metadata.rewardbox_termination_reason``
    (formerly ``rewardbox_finish_reason``), else the line's ``finish_reason``;
    ``truncated_turns`` = ``metadata.rewardbox_truncated_turns`` (null when absent).

    Args:
        path: the JSONL file. Blank lines are ignored.
        tasks: when given, ``domain`` comes from them and only their uids are
            imported; otherwise ``domain`` is ``metadata.rewardbox_domain``, the
            ``test_tags.domain`` or ``metadata.scenario``.

    Returns:
        ``(rows, left_out)``: one row per imported line, file order; and one
        ``"<uid>: <reason>"`` per uid left out (a uid that is not among
        ``tasks``, e.g. screened out or not loaded), once per uid with its line count.

    Raises:
        InterchangeError: a line is not JSON or lacks / mistypes a field
            (strict: the whole file is rejected, naming file, line and field),
            or a (uid, repetition) key repeats.
    """
    domains = {t.uid: t.domain for t in tasks} if tasks is not None else None
    rows, seen, left_out = [], {}, {}
    for lineno, obj in _iter_lines(Path(path)):
        row = _trial_row(obj, Path(path), lineno)
        key = (row["uid"], row["trial"])
        if key in seen:
            raise InterchangeError(
                path, lineno, f"(uid, repetition) {key} repeats line {seen[key]}", "uid"
            )
        seen[key] = lineno
        if domains is not None:
            if row["uid"] not in domains:
                first, count = left_out.get(row["uid"], (lineno, 0))
                left_out[row["uid"]] = (first, count + 1)
                continue
            row["domain"] = domains[row["uid"]]
        rows.append(row)
    reasons = [
        f"{uid}: not among the given tasks (screened out or not loaded); {count} line(s) from line {first} "
        "left out"
        for uid, (first, count) in left_out.items()
    ]
    return pl.DataFrame(rows, schema=ROW_SCHEMA), reasons


def _iter_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InterchangeError(
                    path, lineno, f"not valid JSON: {exc.msg} at column {exc.colno}"
                ) from None
            if not isinstance(obj, dict):
                raise InterchangeError(
                    path, lineno, f"expected a JSON object, got {type(obj).__name__}"
                )
            yield lineno, obj


def _field(
    obj: dict[str, Any],
    name: str,
    types: type | tuple[type, ...],
    path: Path,
    lineno: int,
    *,
    required: bool = True,
    where: str = "",
) -> Any:
    value = obj.get(name)
    label = f"{where}{name}"
    if value is None:
        if required:
            raise InterchangeError(path, lineno, "missing", label)
        return None
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise InterchangeError(path, lineno, f"expected {types}, got bool", label)
    if not isinstance(value, types):
        raise InterchangeError(path, lineno, f"expected {types}, got {type(value).__name__}", label)
    return value


def _trial_row(obj: dict[str, Any], path: Path, lineno: int) -> dict[str, Any]:
    uid = _field(obj, "uid", str, path, lineno)
    metadata = _field(obj, "metadata", dict, path, lineno)
    trial = _field(metadata, "repetition", int, path, lineno, where="metadata.")
    usage = _field(obj, "usage", list, path, lineno, required=False) or []
    tokens = _usage_totals(usage, path, lineno)
    reward, passed, system_error = _outcome(obj, metadata, path, lineno)
    duration_s = _field(
        metadata, "execution_time", (int, float), path, lineno, required=False, where="metadata."
    )
    domain = (
        metadata.get("rewardbox_domain")
        or ((obj.get("test_tags") or {}).get("domain"))
        or metadata.get("scenario")
        or ""
    )
    ours = next((metadata[key] for key in _REASON_KEYS if metadata.get(key)), None)
    reason = ours or obj.get("finish_reason") or ""
    if obj.get("is_system_error") and not ours:
        reason = "system_error"
    return {
        "uid": uid,
        "domain": str(domain),
        "trial": trial,
        "reward": reward,
        "passed": passed,
        "system_error": system_error,
        "termination_reason": str(reason),
        "turns": len(usage) if usage else count_agent_turns(obj.get("messages") or []),
        **tokens,
        "duration_s": float(duration_s or 0.0),
        "tries": int(next((metadata[key] for key in _TRIES_KEYS if metadata.get(key)), 1)),
        "system_error_kind": metadata.get(
            "rewardbox_system_error_kind", "system_error" if system_error is not None else None
        ),
        "retried_system_error_kinds": [
            str(k) for k in metadata.get("rewardbox_retried_system_error_kinds") or []
        ],
        "truncated_turns": metadata.get(
            "rewardbox_truncated_turns"
        ),  # None: not recorded (tb infer runs)
    }


def _usage_totals(usage: list[Any], path: Path, lineno: int) -> dict[str, int]:
    totals = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    for i, item in enumerate(usage):
        where = f"usage[{i}]."
        if not isinstance(item, dict):
            raise InterchangeError(
                path, lineno, f"expected an object, got {type(item).__name__}", f"usage[{i}]"
            )
        totals["input_tokens"] += (
            _field(item, "input_tokens", int, path, lineno, required=False, where=where) or 0
        )
        totals["output_tokens"] += (
            _field(item, "output_tokens", int, path, lineno, required=False, where=where) or 0
        )
        details = item.get("input_tokens_details") or {}
        totals["cached_input_tokens"] += (
            int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        )
    return totals


def _outcome(
    obj: dict[str, Any], metadata: dict[str, Any], path: Path, lineno: int
) -> tuple[float | None, bool | None, str | None]:
    """(reward, passed, system_error) of one DecodeResult
    (docs/thinkingbox.md, "System errors in the harness", "Aggregation")."""
    if obj.get("is_system_error"):
        error = metadata.get("error") if isinstance(metadata.get("error"), dict) else {}
        kind = error.get("type") or "decode"
        return None, None, f"{kind}: {error.get('message') or 'decode system error'}"
    test = _field(obj, "test_result", dict, path, lineno, required=False)
    if test is None:
        return None, None, "missing test_result: the test did not run"
    if test.get("is_system_error"):
        meta = test.get("metadata") if isinstance(test.get("metadata"), dict) else {}
        tb_lines = [line for line in str(test.get("tb") or "").splitlines() if line.strip()]
        return (
            None,
            None,
            f"grader: {meta.get('message') or (tb_lines[-1].strip() if tb_lines else _GRADER_FALLBACK)}",
        )
    passed = _field(test, "result", bool, path, lineno, where="test_result.")
    reward = float(_field(test, "reward", (int, float), path, lineno, where="test_result."))
    if not 0.0 <= reward <= 1.0:
        raise InterchangeError(
            path, lineno, f"reward {reward} is outside [0, 1]", "test_result.reward"
        )
    return reward, passed, None
