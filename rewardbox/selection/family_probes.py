"""The probe campaign with family-level screening: two rounds of trials on one crash-safe journal.

``probe.family_screening`` (docs/learning_run.md, "A wider teachable pool"): round 1 runs ``trials``
trials of the first ``first`` instances of every family (``family_screening.screening_family``), round 2
those of ``more`` further instances of the families whose pooled clean counts after round 1 are mixed
(0 < c < n). Both rounds write to the same journal, so a run killed in round 2 resumes without playing
round 1 again (its trials are in the journal: ``run_trials_async`` returns them without running them,
and the same counts choose the same families). Candidates never probed have no rows: they never get a
difficulty band or enter the training pool. The caller applies the clean-trial gate to
:meth:`FamilyProbeRun.probed_uids`, not to every candidate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from rewardbox.episode.campaign import ROW_SCHEMA
from rewardbox.episode.executor import EpisodeExecutor
from rewardbox.episode.journal import CampaignJournal
from rewardbox.episode.parts import CampaignParts
from rewardbox.episode.progress import ProgressSink, emit
from rewardbox.episode.run import OnResult, run_trials_async
from rewardbox.policy.base import Policy
from rewardbox.selection.config import FamilyScreeningConfig
from rewardbox.selection.family_screening import FamilyScreen, probe_rows_by_family
from rewardbox.tasks.schema import Task


@dataclass(frozen=True)
class FamilyProbeRun:
    """What a family-screened probe campaign produced.

    Attributes:
        rows: one row per probed ``(uid, trial)`` (``episode.campaign.ROW_SCHEMA``), sorted by uid and
            trial; candidates that were not probed have none.
        screen: per family its pooled counts and probed uids, the round sizes, the mixed families.
        config: the ``first`` / ``more`` it ran with.
        candidates: the candidates it screened.
    """

    rows: pl.DataFrame
    screen: FamilyScreen
    config: FamilyScreeningConfig
    candidates: int

    def probed_uids(self) -> list[str]:
        """The tasks probed (in probe order): the ones the clean-trial gate expects a clean trial of."""
        return list(self.screen.counts)

    def metadata(self) -> dict[str, Any]:
        """Plain values for the asset: what was probed per round, which families grew, what was left out."""
        first_round, second_round = self.screen.round_sizes
        return {
            "first": self.config.first,
            "more": self.config.more,
            "families": len(self.screen.families),
            "families_mixed": len(self.screen.mixed_after_first),
            "mixed_families": self.screen.mixed_after_first[:50],
            "tasks_probed_round_1": first_round,
            "tasks_probed_round_2": second_round,
            "candidates": self.candidates,
            "candidates_unprobed": self.candidates - self.screen.tasks_probed(),
        }


def probe_by_family(
    tasks: Sequence[Task],
    trials: int,
    policy: Policy,
    parts: CampaignParts,
    config: FamilyScreeningConfig,
    *,
    journal: CampaignJournal | None = None,
    log: ProgressSink | None = None,
    label: str = "probe_results",
    on_result: OnResult | None = None,
    executor: EpisodeExecutor | None = None,
) -> FamilyProbeRun:
    """``trials`` trials per probed task, in the two rounds of family-level screening; closes the policy.

    Both rounds run on one event loop with one policy (built once, as without screening).

    Args:
        tasks: the screened candidates (grouped by ``family:`` tag; an untagged task is a family of one).
        trials: n, trials per probed task (trial numbers ``0..n-1``, as without screening).
        policy: the base policy (closed here, after both rounds).
        parts: the campaign's runner, episode limits and executor config.
        config: ``first`` and ``more``.
        journal: the campaign's crash-safe journal, shared by both rounds (a killed run resumes).
        log, label, on_result, executor: as ``episode.run.run_trials_async``.

    Returns:
        A :class:`FamilyProbeRun`.

    Raises:
        ValueError: a task with two ``family:`` tags; what ``run_trials_async`` raises (budget, preflight).
    """
    rounds = iter((1, 2))
    kwargs = {"log": log, "journal": journal, "on_result": on_result, "executor": executor}
    with asyncio.Runner() as runner:

        def run_rows(batch: Sequence[Task]) -> pl.DataFrame:
            number = next(rounds)
            emit(log, f"{label}: family screening round {number}: {len(batch)} task(s)")
            rows, _ = runner.run(
                run_trials_async(
                    batch,
                    trials,
                    policy,
                    parts,
                    label=f"{label} (round {number})",
                    keep_results=False,
                    **kwargs,
                )
            )
            return rows

        try:
            rows, screen = probe_rows_by_family(tasks, run_rows, config.first, config.more)
        finally:
            runner.run(policy.aclose())
    rows = rows.sort("uid", "trial") if rows.columns else pl.DataFrame(schema=ROW_SCHEMA)
    return FamilyProbeRun(rows, screen, config, len(tasks))
