"""Reference probes: ``min_clean_runs`` trials of each candidate with the reference policy, system errors refilled.

docs/method.md, "Reference screening". The rows feed
``rewardbox.selection.reference.reference_verdicts``. A trial that ends in a
system error (after the episode's own retries) is re-run, up to
``max_refill_rounds`` rounds; it never counts as a failure. A trial still in
error after the last round stays a system-error row, and its task may end
``incomplete``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from rewardbox.episode.campaign import campaign_keys, merge_repair, repair_keys
from rewardbox.episode.executor import EpisodeExecutor
from rewardbox.episode.journal import CampaignJournal
from rewardbox.episode.parts import CampaignParts
from rewardbox.episode.progress import ProgressSink, emit
from rewardbox.episode.run import run_trials_async
from rewardbox.metrics.rows import system_error_expr
from rewardbox.policy.base import Policy
from rewardbox.selection.reference_config import ReferenceConfig
from rewardbox.tasks.schema import Task


@dataclass(frozen=True)
class ReferenceProbeRun:
    """What a live reference probe produced.

    Attributes:
        rows: one trial row per (uid, trial), trial in ``0..min_clean_runs-1``
            (``rewardbox.episode.campaign.ROW_SCHEMA``); a key still in system
            error after the refills keeps its last system-error row.
        refilled_system_errors: system-error trials that were re-run (each re-run counts once).
        refill_rounds: refill rounds run (0 when the first pass was clean).
    """

    rows: pl.DataFrame
    refilled_system_errors: int
    refill_rounds: int


async def probe_reference_async(
    tasks: Sequence[Task],
    config: ReferenceConfig,
    policy: Policy,
    parts: CampaignParts,
    *,
    journal: CampaignJournal | None = None,
    log: ProgressSink | None = None,
    executor: EpisodeExecutor | None = None,
) -> ReferenceProbeRun:
    """Run ``config.min_clean_runs`` trials of each task with ``policy``, re-running system errors.

    Args:
        tasks: the screened candidates.
        config: the reference section (``min_clean_runs``, ``max_refill_rounds``).
        policy: the reference policy (not closed here).
        parts: the campaign's runner, episode limits and executor config
            (``rewardbox.runtime.compose.campaign_parts``).
        journal: the campaign's crash-safe journal (a killed run resumes), or None.
        log: progress sink (Dagster's ``context.log`` or a callable).
        executor: where episodes run; None builds the parts'.

    Returns:
        A :class:`ReferenceProbeRun`.

    Raises:
        ValueError: ``executor.kind: ray`` with an in-process-only policy (from ``run_trials_async``).
    """
    expected = campaign_keys(tasks, config.min_clean_runs)
    kwargs = {"log": log, "journal": journal, "keep_results": False, "executor": executor}
    rows, _ = await run_trials_async(
        tasks,
        config.min_clean_runs,
        policy,
        parts,
        keys=expected,
        label="reference_probe_results",
        **kwargs,
    )
    refilled, rounds = 0, 0
    while rounds < config.max_refill_rounds:
        keys = repair_keys(rows, expected)
        if not keys:
            break
        rounds += 1
        refilled += len(keys)
        emit(log, f"reference refill round {rounds}: re-running {len(keys)} system-error trial(s)")
        repaired, _ = await run_trials_async(
            tasks,
            config.min_clean_runs,
            policy,
            parts,
            keys=keys,
            label=f"reference_refill_{rounds}",
            **kwargs,
        )
        rows = merge_repair(rows, repaired)
    return ReferenceProbeRun(rows.sort("uid", "trial"), refilled, rounds)


def probe_reference(
    tasks: Sequence[Task], config: ReferenceConfig, policy: Policy, parts: CampaignParts, **kwargs
) -> ReferenceProbeRun:
    """Synchronous :func:`probe_reference_async`; closes the policy's resources after."""

    async def main() -> ReferenceProbeRun:
        try:
            return await probe_reference_async(tasks, config, policy, parts, **kwargs)
        finally:
            await policy.aclose()

    return asyncio.run(main())


def remaining_system_errors(rows: pl.DataFrame) -> int:
    """Rows still in system error (after every refill)."""
    return int(rows.select(system_error_expr(rows).sum()).item()) if rows.height else 0
