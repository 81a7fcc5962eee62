"""Run a campaign of episodes with explicit parts: ``run_trials`` (tasks x trials, or given keys).

Screening, probes, evaluation and the checkpoint gate call this with the
:class:`~rewardbox.episode.parts.CampaignParts` that the composition root
(``rewardbox.runtime.compose.campaign_parts``) builds from a profile; GRPO
rollouts use the same parts and executors. Nothing here reads a profile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial

import polars as pl

from rewardbox.episode.budget import check_policy_budget
from rewardbox.episode.campaign import (
    campaign_keys,
    result_row,
    results_frame,
    rows_frame,
    run_campaign,
)
from rewardbox.episode.executor import EpisodeExecutor
from rewardbox.episode.journal import CampaignJournal
from rewardbox.episode.parts import CampaignParts
from rewardbox.episode.progress import Progress, ProgressSink, emit
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.grading.testrunner import TestRunner
from rewardbox.policy.base import Policy
from rewardbox.tasks.schema import Task

OnResult = Callable[[EpisodeResult], None]
JournalExtra = Callable[[EpisodeResult, Task], dict]


async def run_trials_async(
    tasks: Sequence[Task],
    trials: int,
    policy: Policy,
    parts: CampaignParts,
    *,
    keys: Sequence[tuple[str, int]] | None = None,
    log: ProgressSink | None = None,
    label: str = "episodes",
    keep_results: bool = True,
    on_result: OnResult | None = None,
    journal: CampaignJournal | None = None,
    grader: TestRunner | None = None,
    journal_extra: JournalExtra | None = None,
    executor: EpisodeExecutor | None = None,
) -> tuple[pl.DataFrame, list[EpisodeResult]]:
    """Run ``tasks x trials`` (or the given ``keys``) with ``policy`` and ``parts``; one row per trial.

    With a ``journal`` (crash-safe), keys that already have a clean row there are not run again (resume
    after a crash), every finished trial is durable at once, and the rows returned are the journal's.

    Args:
        log: progress sink (a ``logging.Logger`` such as Dagster's ``context.log``, or ``str -> None``):
            episodes done / total, pass rate, system errors and ETA (``episode.progress.Progress``).
        label: names the stage in the progress lines.
        keep_results: keep every full ``EpisodeResult`` (hundreds of KiB each); False keeps only rows.
        on_result: called with each finished trial.
        grader: replaces the parts' grading worker pool (not closed here; local executor only).
        journal_extra: ``(result, task) -> dict`` of extra columns for each journal row.
        executor: where the episodes run; None builds ``parts.build_executor()`` and closes it after.

    Returns:
        (rows in ``campaign.ROW_SCHEMA``, the full results run by this call, or ``[]`` without ``keep_results``).

    Raises:
        ValueError: ``executor.kind: ray`` with the local model policy (in-process only).
        TokenBudgetError, TurnBudgetError: the budgets cannot hold the tasks' golden trajectories.
        EndpointPreflightError: an endpoint the episodes would call does not answer or does not serve
            its model (``parts.preflight``); raised before any episode, nothing written.
    """
    expected = list(keys) if keys is not None else campaign_keys(tasks, trials)
    keys = await _keys_to_run(tasks, expected, policy, parts, journal, log)
    finished = partial(_on_finished, {t.uid: t for t in tasks}, on_result, journal, journal_extra)
    collected = await _run_keys(
        tasks,
        keys,
        policy,
        parts,
        executor,
        grader,
        progress=(label, log),
        finished=finished,
        keep_results=keep_results,
    )
    if journal is not None:
        journal.flush()
        return journal.rows(expected), (collected if keep_results else [])
    if not keep_results:
        return rows_frame(collected), []
    return results_frame(collected, tasks), collected


async def _keys_to_run(
    tasks: Sequence[Task],
    expected: list[tuple[str, int]],
    policy: Policy,
    parts: CampaignParts,
    journal: CampaignJournal | None,
    log: ProgressSink | None,
) -> list[tuple[str, int]]:
    """The keys still to run (not clean in the journal), after the budget check and, when any, the preflight."""
    check_policy_budget(policy, parts.episode, tasks)
    keys = journal.todo(expected) if journal is not None else expected
    if keys:
        await asyncio.to_thread(parts.preflight, policy)
    if journal is not None and len(keys) < len(expected):
        emit(
            log,
            f"resuming: {len(expected) - len(keys)} of {len(expected)} trials already in {journal.directory}",
        )
    return keys


async def _run_keys(
    tasks: Sequence[Task],
    keys: Sequence[tuple[str, int]],
    policy: Policy,
    parts: CampaignParts,
    executor: EpisodeExecutor | None,
    grader: TestRunner | None,
    *,
    progress: tuple[str, ProgressSink | None],
    finished: Callable[[Progress, EpisodeResult], None],
    keep_results: bool,
) -> list:
    """Run ``keys`` in one executor session; returns the results, or their rows without ``keep_results``.

    ``progress`` is the (label, sink) of the progress lines; ``executor`` None builds and closes the parts'.
    """
    owned = executor is None
    executor = executor or parts.build_executor()
    domain = {t.uid: t.domain for t in tasks}
    try:
        with Progress(len(keys), *progress) as counter:
            async with executor.session(parts.runner_factory(grader), policy) as session:
                counter.running(session.width)
                return await run_campaign(
                    tasks,
                    keys,
                    session.run_one,
                    concurrency=session.width,
                    on_result=partial(finished, counter),
                    collect=None if keep_results else partial(result_row, domain=domain),
                )
    finally:
        if owned:
            executor.close()


def _on_finished(
    by_uid: dict[str, Task],
    on_result: OnResult | None,
    journal: CampaignJournal | None,
    journal_extra: JournalExtra | None,
    progress: Progress,
    result: EpisodeResult,
) -> None:
    """The per-trial hook: the caller's ``on_result``, the journal row, then the progress line."""
    if on_result is not None:
        on_result(result)
    if journal is not None:
        extra = journal_extra(result, by_uid[result.uid]) if journal_extra else {}
        journal.append({**result.to_row(), "domain": by_uid[result.uid].domain, **extra})
    progress.episode(result)


def run_trials(tasks: Sequence[Task], trials: int, policy: Policy, parts: CampaignParts, **kwargs):
    """Synchronous wrapper of ``run_trials_async`` (closes the policy's resources after).

    Returns:
        What ``run_trials_async`` returns; raises what it raises.
    """

    async def main():
        try:
            return await run_trials_async(tasks, trials, policy, parts, **kwargs)
        finally:
            await policy.aclose()

    return asyncio.run(main())
