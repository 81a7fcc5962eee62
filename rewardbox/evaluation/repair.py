"""One repair pass: re-run the keys of a campaign that are missing or ended in a system error.

A system error is an infrastructure fault, never a reward of 0 (docs/method.md, "Episode"): an
evaluation campaign re-runs those (uid, trial) keys once with a fresh policy and keeps the new
rows in their place, so the coverage gate sees every key exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from rewardbox.episode.campaign import campaign_keys, merge_repair, repair_keys
from rewardbox.episode.parts import CampaignParts
from rewardbox.episode.progress import ProgressSink, emit
from rewardbox.episode.run import run_trials
from rewardbox.policy.base import Policy
from rewardbox.tasks.schema import Task


def run_with_repair(
    tasks: Sequence[Task],
    trials: int,
    make_policy: Callable[[], Policy],
    parts: CampaignParts,
    *,
    log: ProgressSink | None = None,
    label: str = "",
    **run_kwargs: Any,
) -> tuple[pl.DataFrame, int]:
    """Run every task x ``trials`` key, then re-run once the keys that are missing or system errors.

    Args:
        tasks: the campaign's tasks.
        trials: k, trials per task (keys ``(uid, 0..k-1)``).
        make_policy: returns a fresh policy; called once per pass (``run_trials`` closes the one it gets).
        parts: the campaign's runner, episode limits and executor config
            (``rewardbox.runtime.compose.campaign_parts``).
        log: progress sink; the repair pass announces how many keys it re-runs.
        label: progress label of the first pass (the repair pass is labelled ``repair``).
        **run_kwargs: passed to ``run_trials`` on both passes (``journal``, ``journal_extra``,
            ``keep_results``, ``executor``).

    Returns:
        ``(rows, repaired_keys)``: one row per (uid, trial) key run (``ROW_SCHEMA`` plus any
        journal columns), a repaired key's row replaced by its re-run; and how many keys the
        repair pass re-ran (0 when the first pass was complete and clean). A key still failing
        after the repair keeps its system-error row (the coverage gate then reports it).

    Raises:
        Whatever ``run_trials`` raises for a bad configuration; episode faults are rows, not errors.
    """
    rows = run_trials(tasks, trials, make_policy(), parts, log=log, label=label, **run_kwargs)[0]
    redo = repair_keys(rows, campaign_keys(tasks, trials))
    if redo:
        emit(log, f"repair run: {len(redo)} missing or system-error keys")
        repaired = run_trials(
            tasks, trials, make_policy(), parts, keys=redo, log=log, label="repair", **run_kwargs
        )[0]
        rows = merge_repair(rows, repaired)
    return rows, len(redo)
