"""ThinkingBox interchange: our trials as ``DecodeResult`` JSONL, ``tb infer`` JSONL as our rows.

Export (docs/thinkingbox.md, "DecodeResult rows") writes one ``DecodeResult`` JSON object per
line, in input order, with every field: ``uid``, ``messages`` (tagged union on
``T``: ``Text`` / ``ParallelToolCall`` / ``ToolResponse``), ``test_result``,
``test_context``, ``test_tags``, ``tools``, ``raw_messages``, ``user_llm_history``,
``usage`` (one entry per agent completion), ``metadata``, ``is_system_error``,
``finish_reason``, so ``tb agg`` / ``tb sbs`` read our campaigns.

Import reads ``tb infer`` output into the trial-row schema
(``rewardbox.episode.campaign.ROW_SCHEMA``) so existing probe runs feed
``rewardbox.selection.task_difficulty`` without re-running them.

System errors (docs/thinkingbox.md, "System errors in the harness"): a *decode*
system error is ``is_system_error: true`` with
``metadata.error = {type, message, tb}`` and no ``test_result``; a *test* system
error is ``test_result.is_system_error: true``. Both become a non-null
``system_error`` string on import (never a reward of 0). ThinkingBox names an
episode's termination reason ``finish_reason``; ours
(``rewardbox.episode.termination.TerminationReason``) outside its set
(``context_limit``, ``system_error``) are written as ``agent_limit`` / ``done``
and kept verbatim in ``metadata.rewardbox_termination_reason`` (files written
before the rename carry ``metadata.rewardbox_finish_reason``, read as well).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

from rewardbox import strict_json
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.grading.tb_common.chat_types import FinishReason
from rewardbox.grading.tb_messages import tb_messages, tb_tool_calls
from rewardbox.tasks.schema import Task
from rewardbox.thinkingbox.importer import (
    InterchangeError,
    import_infer_report,
    import_infer_results,
)

TB_FINISH_REASONS: tuple[str, ...] = get_args(FinishReason)
"""``DecodeResult.finish_reason`` values ThinkingBox accepts (the vendored ``chat_types.FinishReason``)."""

_TO_TB_FINISH = {"context_limit": "agent_limit", "system_error": "done", "": "done"}
_NULL_SESSION = "00000000-0000-0000-0000-000000000000"


# ----- export ----------------------------------------------------------------------------


def export_decode_results(
    results: Sequence[EpisodeResult], tasks: Sequence[Task], path: str | os.PathLike
) -> Path:
    """Write trials as ThinkingBox ``DecodeResult`` JSONL (one row per result, input order).

    Args:
        results: trials of a campaign (probe or evaluation), e.g. the second
            value returned by ``rewardbox.episode.run.run_trials``.
        tasks: the tasks the results came from (scenario, agent, file, tags, tools).
        path: output file; parent directories are created; written atomically.

    Returns:
        The path written.

    Raises:
        ValueError: a result's uid is not among ``tasks`` (names the uid).
    """
    by_uid = {t.uid: t for t in tasks}
    missing = sorted({r.uid for r in results} - set(by_uid))
    if missing:
        raise ValueError(
            f"export_decode_results: no task for uid(s) {missing[:5]} ({len(missing)} in all); "
            "pass the tasks the results came from"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for result in results:
            f.write(
                strict_json.dumps(
                    decode_result_row(result, by_uid[result.uid]), ensure_ascii=False, default=str
                )
            )
            f.write("\n")
    tmp.replace(path)
    return path


def decode_result_json(result: EpisodeResult, task: Task) -> str:
    """One ``DecodeResult`` JSONL line (without the newline), as ``export_decode_results`` writes it."""
    return strict_json.dumps(decode_result_row(result, task), ensure_ascii=False, default=str)


def write_decode_lines(lines: Sequence[str], path: str | os.PathLike) -> Path:
    """Write ``DecodeResult`` JSONL lines (from :func:`decode_result_json`) atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    tmp.replace(path)
    return path


def decode_result_row(result: EpisodeResult, task: Task) -> dict[str, Any]:
    """One ``DecodeResult`` as a JSON-ready dict (every field of docs/thinkingbox.md, "DecodeResult rows")."""
    decode_error = result.system_error is not None and not _is_test_error(result)
    messages = tb_messages(result.messages, _end_turn_names(result, task))
    row: dict[str, Any] = {
        "uid": result.uid,
        "messages": messages,
        "test_result": None if decode_error else _test_result(result),
        "test_context": None if decode_error else _test_context(result, messages),
        "test_tags": tb_test_tags(task.tags),
        "tools": _tool_defs(result, task),
        "raw_messages": _jsonable(result.messages),
        "user_llm_history": None,  # the user simulator is stateless; its prompts are not kept
        "usage": [_usage(turn) for turn in result.agent_turns],
        "metadata": _metadata(result, task, decode_error),
        "is_system_error": decode_error,
        "finish_reason": _TO_TB_FINISH.get(_reason(result), _reason(result)),
    }
    if row["finish_reason"] not in TB_FINISH_REASONS:
        row["finish_reason"] = "done"
    return row


def _reason(result: EpisodeResult) -> str:
    """The episode's termination reason as its string value ("" before the episode ended)."""
    return "" if result.termination_reason is None else str(result.termination_reason)


def _is_test_error(result: EpisodeResult) -> bool:
    return result.test_outcome is not None and result.test_outcome.is_system_error


def _test_result(result: EpisodeResult) -> dict[str, Any] | None:
    outcome = result.test_outcome
    if outcome is None:
        return None
    metadata = dict(outcome.metadata)
    if outcome.message:
        metadata.setdefault("message", outcome.message)
    return {
        "result": bool(outcome.result),
        "reward": float(outcome.reward),
        "is_system_error": bool(outcome.is_system_error),
        "tb": outcome.tb,
        "prints": outcome.prints,
        "lineno": -1 if outcome.lineno is None else int(outcome.lineno),
        "line_content": outcome.line_content,
        "metadata": _jsonable(metadata),
    }


def _test_context(result: EpisodeResult, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "response": result.response,
        "tool_direct_responses": [
            m["content"]
            for m in messages
            if m["T"] == "Text" and m["metadata"].get("tag") == "direct"
        ],
        "effects": _jsonable(result.effects),
        "tool_calls": tb_tool_calls(messages),
        "messages": messages,
        "init_result": {},  # not kept on EpisodeResult
        "session_id": _NULL_SESSION,
        "metadata": {
            "uid": result.uid,
            "repetition": result.trial,
            "finish_reason": _reason(result),
        },
    }


def tb_test_tags(tags: Sequence[str]) -> dict[str, Any]:
    """Flat tags -> ThinkingBox ``TestCaseTags`` (``domain:``, ``eval:``, ``category:``, ``skip``, labels)."""
    out: dict[str, Any] = {
        "labels": [],
        "category": [],
        "domain": None,
        "eval_type": None,
        "skip": False,
    }
    for tag in tags:
        low = tag.lower()
        if low.startswith("domain:"):
            out["domain"] = low[len("domain:") :]
        elif low.startswith("eval:"):
            out["eval_type"] = low[len("eval:") :]
        elif low.startswith("category:"):
            out["category"].append(low[len("category:") :])
        elif low == "skip":
            out["skip"] = True
        else:
            out["labels"].append(tag)
    return out


def _end_turn_names(result: EpisodeResult, task: Task) -> set[str]:
    names = {t["name"] for t in task.builtin_tools if t.get("is_end_turn")}
    names |= {t.name for t in task.tools if t.is_end_turn}
    return names | {
        getattr(t, "name", "") for t in result.tools if getattr(t, "is_end_turn", False)
    }


def _tool_defs(result: EpisodeResult, task: Task) -> list[dict[str, Any]]:
    """ThinkingBox ``ToolDef``s of the tools the agent saw (builtin ones first)."""
    direct = {t.name: t.direct_response for t in task.tools}
    out = []
    for spec in result.tools:
        if isinstance(spec, dict):  # already a plain dict (e.g. a reloaded result)
            name, description = spec.get("name", ""), spec.get("description", "")
            schema, end_turn = (
                spec.get("input_schema") or spec.get("parameters") or {},
                spec.get("is_end_turn", False),
            )
        else:
            name, description, schema, end_turn = (
                spec.name,
                spec.description,
                spec.input_schema,
                spec.is_end_turn,
            )
        out.append(
            {
                "name": name,
                "description": description,
                "input_schema": _jsonable(schema),
                "direct_response": direct.get(name),
                "is_end_turn": bool(end_turn),
            }
        )
    return out


def _usage(turn: Any) -> dict[str, Any]:
    """ThinkingBox ``Usage`` of one agent completion (reasoning tokens 0 unless recorded)."""
    reasoning = int(getattr(turn, "reasoning_tokens", 0) or 0)
    return {
        "input_tokens": int(turn.input_tokens),
        "input_tokens_details": {"cached_tokens": int(turn.cached_input_tokens)},
        "output_tokens": int(turn.output_tokens),
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": int(turn.input_tokens) + int(turn.output_tokens),
    }


def _metadata(result: EpisodeResult, task: Task, decode_error: bool) -> dict[str, Any]:
    meta = task.metadata
    metadata: dict[str, Any] = {
        "scenario": meta.get("scenario", task.scenario),
        "test_case_file": meta.get("test_case_file", task.test_file),
        "test_case_name": meta.get("test_case_name", task.test_name),
        "agent": meta.get("agent", task.agent),
        "repetition": result.trial,
        "execution_time": result.duration_s,
        "time_agent": result.time_agent_s,
        "time_user": result.time_user_s,
        "time_tool": result.time_tool_s,
        "time_test": result.time_test_s,
        "time_agent_user_loop": max(0.0, result.duration_s - result.time_test_s),
        "rewardbox_termination_reason": _reason(result),
        "rewardbox_tries": result.tries,
        "rewardbox_system_error_kind": result.system_error_kind,
        "rewardbox_retried_system_error_kinds": list(result.retried_system_error_kinds),
        "rewardbox_truncated_turns": result.to_row()["truncated_turns"],
        "rewardbox_domain": task.domain,
    }
    if decode_error:
        kind, _, message = (result.system_error or "").partition(": ")
        metadata["error"] = {
            "type": kind or "system",
            "message": message or result.system_error,
            "tb": "",
        }
    return metadata


def _jsonable(value: Any) -> Any:
    return json.loads(strict_json.dumps(value, ensure_ascii=False, default=str))


__all__ = [
    "TB_FINISH_REASONS",
    "InterchangeError",
    "decode_result_json",
    "decode_result_row",
    "export_decode_results",
    "import_infer_report",
    "import_infer_results",
    "tb_test_tags",
    "write_decode_lines",
]
