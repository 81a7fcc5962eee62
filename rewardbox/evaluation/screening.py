"""Task validity screen: golden replay passes, a null run fails where a write is expected.

A task is valid when (DESIGN.md checks; STYLE.md "Environments"):
- its golden trajectory uses only the scenario's tools;
- its golden state can be built (no ``golden_error`` in the effects);
- replaying the golden trajectory through the real episode loop and grader passes;
- every golden action is accepted by its tool: a refused one (a tool output
  ``{"error": ...}``, or a ``golden_error`` in the effects) makes the task
  invalid with the step and the tool's message, even when the grader stopped on
  it; it is a fault of the task, not a system error;
- a task tagged ``expects_write`` has golden actions that write (its golden state
  differs from the initial state), and one tagged ``no_write`` has none that do;
- a null run (no tool calls) fails whenever the golden state differs from the
  initial state (a write is expected). Trap tasks, whose right action is to do
  nothing, expect no write and are exempt from the null check.
Invalid tasks are reported by uid with the reason and kept out of every
downstream asset. A system error during screening is reported as such.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.evaluation.services import run_trials
from rewardbox.grading.canonical import state_hash
from rewardbox.policy.scripted import GoldenReplayPolicy, NullPolicy
from rewardbox.tasks.schema import Task

WRITE_TAG, NO_WRITE_TAG = "expects_write", "no_write"
"""Task tags that state whether the golden actions must change the state."""

SCREEN_SCHEMA = {"uid": pl.Utf8, "domain": pl.Utf8, "valid": pl.Boolean, "expects_write": pl.Boolean,
                 "golden_passed": pl.Boolean, "null_passed": pl.Boolean, "reason": pl.Utf8}


def expects_write(result: EpisodeResult) -> bool:
    """True when some server's golden state differs from its initial state."""
    for effects in result.effects.values():
        if isinstance(effects, dict) and "golden_db_hash" in effects:
            if effects["golden_db_hash"] != state_hash(effects.get("initial_db_state", {})):
                return True
    return False


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
            return f"step {step} ({(record.get('tool_call') or {}).get('name')}): {payload['error']}"
    return None


def write_tag_mismatch(task: Task, writes: bool) -> str | None:
    """Why the task's ``expects_write`` / ``no_write`` tag disagrees with its golden run, or None."""
    tools = [tool for _, tool, _ in task.golden_interactions()]
    if WRITE_TAG in task.tags and not writes:
        return (f"tagged {WRITE_TAG!r} but the golden actions write nothing (golden state equals the initial "
                f"state; golden actions: {tools})")
    if NO_WRITE_TAG in task.tags and writes:
        return f"tagged {NO_WRITE_TAG!r} but the golden actions change the state (golden actions: {tools})"
    return None


def screen_verdict(task: Task, golden: EpisodeResult, null: EpisodeResult) -> dict:
    """One screening row for a task from its golden-replay and null results."""
    row = {"uid": task.uid, "domain": task.domain, "valid": False, "expects_write": None,
           "golden_passed": golden.passed, "null_passed": null.passed, "reason": ""}
    unknown = sorted({tool for _, tool, _ in task.golden_interactions()} - set(task.available_tools))
    golden_errors = [e.get("golden_error") for e in golden.effects.values() if isinstance(e, dict) and e.get("golden_error")]
    refused = refused_golden_action(golden)
    if unknown:
        row["reason"] = f"golden trajectory uses tools outside the scenario: {unknown}"
    elif refused or golden_errors:
        row["reason"] = (f"invalid task: a golden action is refused at {refused}" if refused
                         else f"golden state cannot be built: {golden_errors[0]}")
    elif golden.system_error or null.system_error:
        row["reason"] = f"system error while screening: {golden.system_error or null.system_error}"
    elif not golden.passed:
        message = golden.test_outcome.message if golden.test_outcome else ""
        row["reason"] = f"golden replay fails its own test: {message[:300]}"
    else:
        row["expects_write"] = expects_write(golden)
        mismatch = write_tag_mismatch(task, row["expects_write"])
        if mismatch:
            row["reason"] = mismatch
        elif row["expects_write"] and null.passed:
            row["reason"] = "null run passes although a write is expected"
        else:
            row["valid"] = True
    return row


def screen_tasks(tasks: Sequence[Task], profile: Profile) -> tuple[list[Task], pl.DataFrame]:
    """Run the golden and null policies once per task through the real loop and grader.

    Returns:
        (valid tasks in input order, one screening row per task).
    """
    longest = max((len(t.golden_interactions()) for t in tasks), default=0)
    episode = profile.episode.model_copy(update={
        "max_agent_steps_per_user_turn": max(profile.episode.max_agent_steps_per_user_turn, longest + 2)})
    profile = profile.model_copy(update={"episode": episode})
    _, golden = run_trials(tasks, 1, GoldenReplayPolicy(), profile)
    _, null = run_trials(tasks, 1, NullPolicy(), profile)
    golden_by, null_by = {r.uid: r for r in golden}, {r.uid: r for r in null}
    rows = [screen_verdict(t, golden_by[t.uid], null_by[t.uid]) for t in tasks]
    valid = {r["uid"] for r in rows if r["valid"]}
    return [t for t in tasks if t.uid in valid], pl.DataFrame(rows, schema=SCREEN_SCHEMA)
