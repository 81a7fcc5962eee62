"""Task validity screen: golden replay passes, a null run fails where a write is expected.

A task is valid when (DESIGN.md checks; STYLE.md "Environments"):
- its golden trajectory uses only the scenario's tools;
- its golden state can be built (no ``golden_error`` in the effects);
- replaying the golden trajectory through the real episode loop and grader passes;
- a null run (no tool calls) fails whenever the golden state differs from the
  initial state (a write is expected). Trap tasks, whose right action is to do
  nothing, expect no write and are exempt from the null check.
Invalid tasks are reported by uid with the reason and kept out of every
downstream asset. A system error during screening is reported as such.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.episode.progress import ProgressSink
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.evaluation.services import run_trials
from rewardbox.grading.canonical import state_hash
from rewardbox.policy.scripted import GoldenReplayPolicy, NullPolicy
from rewardbox.tasks.schema import Task

SCREEN_SCHEMA = {"uid": pl.Utf8, "domain": pl.Utf8, "valid": pl.Boolean, "expects_write": pl.Boolean,
                 "golden_passed": pl.Boolean, "null_passed": pl.Boolean, "reason": pl.Utf8}


def expects_write(result: EpisodeResult) -> bool:
    """True when some server's golden state differs from its initial state."""
    for effects in result.effects.values():
        if isinstance(effects, dict) and "golden_db_hash" in effects:
            if effects["golden_db_hash"] != state_hash(effects.get("initial_db_state", {})):
                return True
    return False


def screen_verdict(task: Task, golden: EpisodeResult, null: EpisodeResult) -> dict:
    """One screening row for a task from its golden-replay and null results."""
    row = {"uid": task.uid, "domain": task.domain, "valid": False, "expects_write": None,
           "golden_passed": golden.passed, "null_passed": null.passed, "reason": ""}
    unknown = sorted({tool for _, tool, _ in task.golden_interactions()} - set(task.available_tools))
    golden_errors = [e.get("golden_error") for e in golden.effects.values() if isinstance(e, dict) and e.get("golden_error")]
    if unknown:
        row["reason"] = f"golden trajectory uses tools outside the scenario: {unknown}"
    elif golden.system_error or null.system_error:
        row["reason"] = f"system error while screening: {golden.system_error or null.system_error}"
    elif golden_errors:
        row["reason"] = f"golden state cannot be built: {golden_errors[0]}"
    elif not golden.passed:
        message = golden.test_outcome.message if golden.test_outcome else ""
        row["reason"] = f"golden replay fails its own test: {message[:300]}"
    else:
        row["expects_write"] = expects_write(golden)
        if row["expects_write"] and null.passed:
            row["reason"] = "null run passes although a write is expected"
        else:
            row["valid"] = True
    return row


def screen_tasks(tasks: Sequence[Task], profile: Profile, *,
                 log: ProgressSink | None = None) -> tuple[list[Task], pl.DataFrame]:
    """Run the golden and null policies once per task through the real loop and grader.

    ``log`` receives the progress lines of both passes (see ``run_trials_async``).

    Returns:
        (valid tasks in input order, one screening row per task).
    """
    longest = max((len(t.golden_interactions()) for t in tasks), default=0)
    episode = profile.episode.model_copy(update={
        "max_agent_steps_per_user_turn": max(profile.episode.max_agent_steps_per_user_turn, longest + 2)})
    profile = profile.model_copy(update={"episode": episode})
    _, golden = run_trials(tasks, 1, GoldenReplayPolicy(), profile, log=log, label="screen (golden replay)")
    _, null = run_trials(tasks, 1, NullPolicy(), profile, log=log, label="screen (null run)")
    golden_by, null_by = {r.uid: r for r in golden}, {r.uid: r for r in null}
    rows = [screen_verdict(t, golden_by[t.uid], null_by[t.uid]) for t in tasks]
    valid = {r["uid"] for r in rows if r["valid"]}
    return [t for t in tasks if t.uid in valid], pl.DataFrame(rows, schema=SCREEN_SCHEMA)
