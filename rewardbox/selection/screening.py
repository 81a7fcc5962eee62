"""Task validity screen: golden replay passes, a null run fails where a write is expected.

A task is valid when (docs/method.md, "Task screening"):
- its golden trajectory uses only the scenario's tools;
- its golden state can be built (no ``golden_error`` in the effects);
- replaying the golden trajectory through the real episode loop and grader passes;
- every golden action is accepted by its tool: a refused one (a tool output
  ``{"error": ...}``, or a ``golden_error`` in the effects) makes the task
  invalid with the step and the tool's message, even when the grader stopped on
  it; it is a fault of the task, not a system error;
- a task tagged ``expects_write`` has golden actions that write, and one tagged
  ``no_write`` has none that do;
- a null run (no tool calls) fails whenever a write is expected.

Whether a write is expected is decided from each server's own report, never by
re-hashing its state with our hash function (an external server hashes its own
way): a server expects no write when the null run's ``result_db_hash`` equals
the ``golden_db_hash`` it reports (the golden state *is* the starting state).
When no server reports a ``golden_db_hash`` (a server whose effects are raw
state), there is no evidence either way: ``expects_write`` and ``read_only``
are null (unknown), the task's write tag cannot be checked, and the
read-only rules below do not apply to it (:func:`write_evidence_counts` counts
such tasks). Tasks that expect no write (read-only and trap tasks) are valid and marked
``read_only`` (row column and ``Task.metadata["read_only"]``); when their null run
passes as well, they teach nothing in training (``null_passed``) but still
measure a policy in evaluation. Invalid tasks are reported by uid with the
reason and kept out of every downstream asset; a task that could not be graded
(a system error) has its cause in ``system_error``, so that callers can refuse
to drop it silently (:func:`ungradable`).

Screening is the first gate of task selection, so it lives here: it runs
episodes, and ``rewardbox.tasks`` sits below the episode layer (the episode
layer imports it), so a screen there would make a package cycle.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

import polars as pl

from rewardbox.episode.executor import EpisodeExecutor
from rewardbox.episode.parts import CampaignParts
from rewardbox.episode.progress import ProgressSink
from rewardbox.episode.run import run_trials
from rewardbox.episode.termination import TerminationReason
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.policy.scripted import GoldenReplayPolicy, NullPolicy
from rewardbox.tasks.schema import Task

WRITE_TAG, NO_WRITE_TAG = "expects_write", "no_write"
"""Task tags that state whether the golden actions must change the state."""

SCREEN_SCHEMA = {
    "uid": pl.Utf8,
    "domain": pl.Utf8,
    "valid": pl.Boolean,
    "expects_write": pl.Boolean,
    "read_only": pl.Boolean,
    "golden_passed": pl.Boolean,
    "null_passed": pl.Boolean,
    "system_error": pl.Utf8,
    "system_error_kind": pl.Utf8,
    "reason": pl.Utf8,
}


def expects_write(golden: EpisodeResult, null: EpisodeResult) -> bool | None:
    """True when some server's golden state differs from the state a do-nothing run leaves.

    Per server that reports a ``golden_db_hash``: no write is expected when the
    null run's ``result_db_hash`` (same server, same hash function) equals it.
    A server whose null run reports no ``result_db_hash`` counts as expecting a write.

    Returns:
        True / False, or None (unknown) when no server reports a ``golden_db_hash``:
        raw-state effects are no evidence that the golden actions write nothing.
    """
    evidence = False
    for server, effects in golden.effects.items():
        if not isinstance(effects, dict) or effects.get("golden_db_hash") is None:
            continue
        evidence = True
        null_effects = null.effects.get(server)
        if (
            not isinstance(null_effects, dict)
            or null_effects.get("result_db_hash") != effects["golden_db_hash"]
        ):
            return True
    return False if evidence else None


def refused_golden_action(golden: EpisodeResult) -> str | None:
    """The first golden action its tool refused, as ``"step <i> (<tool>): <message>"``; None if none.

    A refusal is a tool output that is a JSON object with an ``error`` (the
    embedded domains' convention); ``i`` counts the golden replay's tool calls from 0.
    """
    for step, record in enumerate(golden.tool_calls):
        try:
            payload = json.loads(record.get("tool_response") or "")
        except (TypeError, ValueError):
            continue
        if isinstance(payload, dict) and payload.get("error"):
            return (
                f"step {step} ({(record.get('tool_call') or {}).get('name')}): {payload['error']}"
            )
    return None


def write_tag_mismatch(task: Task, writes: bool | None) -> str | None:
    """Why the task's ``expects_write`` / ``no_write`` tag disagrees with its golden run, or None
    (also None when ``writes`` is unknown: there is nothing to check the tag against)."""
    if writes is None:
        return None
    tools = [tool for _, tool, _ in task.golden_interactions()]
    if WRITE_TAG in task.tags and not writes:
        return (
            f"tagged {WRITE_TAG!r} but the golden actions write nothing (golden state equals the initial "
            f"state; golden actions: {tools})"
        )
    if NO_WRITE_TAG in task.tags and writes:
        return f"tagged {NO_WRITE_TAG!r} but the golden actions change the state (golden actions: {tools})"
    return None


def screen_verdict(task: Task, golden: EpisodeResult, null: EpisodeResult) -> dict:
    """One screening row for a task from its golden-replay and null results."""
    row = {
        "uid": task.uid,
        "domain": task.domain,
        "valid": False,
        "expects_write": None,
        "read_only": None,
        "golden_passed": golden.passed,
        "null_passed": null.passed,
        "system_error": golden.system_error or null.system_error,
        "system_error_kind": (
            golden.system_error_kind if golden.system_error else null.system_error_kind
        )
        if golden.system_error or null.system_error
        else None,
        "reason": "",
    }
    unknown = sorted(
        {tool for _, tool, _ in task.golden_interactions()} - set(task.available_tools)
    )
    golden_errors = [
        e.get("golden_error")
        for e in golden.effects.values()
        if isinstance(e, dict) and e.get("golden_error")
    ]
    refused = refused_golden_action(golden)
    if unknown:
        row["reason"] = f"golden trajectory uses tools outside the scenario: {unknown}"
    elif refused or golden_errors:
        row["reason"] = (
            f"invalid task: a golden action is refused at {refused}"
            if refused
            else f"golden state cannot be built: {golden_errors[0]}"
        )
    elif golden.system_error or null.system_error:
        row["reason"] = f"system error while screening: {golden.system_error or null.system_error}"
    elif not golden.passed and golden.termination_reason == TerminationReason.AGENT_LIMIT:
        needed = len(task.golden_interactions()) + 1
        row["reason"] = (
            f"the task's own agent-turn limit ({task.max_agent_turns}) is below its golden trajectory "
            f"({needed - 1} calls and the answer: {needed} agent completions)"
        )
    elif not golden.passed:
        message = golden.test_outcome.message if golden.test_outcome else ""
        row["reason"] = f"golden replay fails its own test: {message[:300]}"
    else:
        row["expects_write"] = expects_write(golden, null)
        row["read_only"] = None if row["expects_write"] is None else not row["expects_write"]
        mismatch = write_tag_mismatch(task, row["expects_write"])
        if mismatch:
            row["reason"] = mismatch
        elif row["expects_write"] and null.passed:
            row["reason"] = "null run passes although a write is expected"
        else:
            row["valid"] = True
    return row


def screen_tasks(
    tasks: Sequence[Task],
    parts: CampaignParts,
    executor: EpisodeExecutor | None = None,
    *,
    log: ProgressSink | None = None,
) -> tuple[list[Task], pl.DataFrame]:
    """Run the golden and null policies once per task through the real loop and grader.

    ``parts`` are the campaign's (``rewardbox.runtime.compose.campaign_parts``); ``executor`` runs the
    episodes (None: the parts', see ``run_trials``);
    ``log`` receives the progress lines of both passes (see ``run_trials_async``).

    Returns:
        (valid tasks in input order, one screening row per task).
    """
    longest = max((len(t.golden_interactions()) for t in tasks), default=0)
    # the golden replay writes one call per completion, then answers: the campaign's agent limits (which
    # bound the policy under test) must not cut it, or a valid deep task reads as ungradable
    parts = parts.with_episode(
        max_agent_turns=max(parts.episode.max_agent_turns, longest + 2),
        max_agent_steps_per_user_turn=max(parts.episode.max_agent_steps_per_user_turn, longest + 2),
    )
    _, golden = run_trials(
        tasks,
        1,
        GoldenReplayPolicy(),
        parts,
        executor=executor,
        log=log,
        label="screen (golden replay)",
    )
    _, null = run_trials(
        tasks, 1, NullPolicy(), parts, executor=executor, log=log, label="screen (null run)"
    )
    golden_by, null_by = {r.uid: r for r in golden}, {r.uid: r for r in null}
    rows = {t.uid: screen_verdict(t, golden_by[t.uid], null_by[t.uid]) for t in tasks}
    valid = [_marked(t, rows[t.uid]) for t in tasks if rows[t.uid]["valid"]]
    return valid, pl.DataFrame(list(rows.values()), schema=SCREEN_SCHEMA)


def _marked(task: Task, row: dict) -> Task:
    """``task`` with ``metadata["read_only"]`` set for a task that expects no write (None: unknown)."""
    if row["read_only"] is None:
        return replace(task, metadata={**task.metadata, "read_only": None})
    if not row["read_only"]:
        return task
    return replace(
        task, metadata={**task.metadata, "read_only": True, "null_passes": bool(row["null_passed"])}
    )


def write_evidence_counts(report: pl.DataFrame) -> dict[str, int]:
    """Valid screened tasks by what their servers' hashes say: ``expects_write``, ``read_only``,
    ``write_unknown`` (no server reported a ``golden_db_hash``, so neither is known)."""
    valid = report.filter(pl.col("valid"))
    return {
        "expects_write": int(valid["expects_write"].fill_null(False).sum()),
        "read_only": int(valid["read_only"].fill_null(False).sum()),
        "write_unknown": int(valid["expects_write"].is_null().sum()),
    }


def ungradable(report: pl.DataFrame) -> list[str]:
    """``"uid: cause"`` for every screened task that could not be graded (a system error).

    Such a task is neither valid nor invalid: dropping it silently would shrink a
    benchmark unnoticed, so the benchmark asset fails on any of these.
    """
    rows = report.filter(pl.col("system_error").is_not_null()).select("uid", "system_error")
    return [f"{uid}: {cause}" for uid, cause in rows.iter_rows()]
