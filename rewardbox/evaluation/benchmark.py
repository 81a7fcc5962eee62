"""An evaluation campaign: every benchmark task x n trials of one policy, one repair pass, coverage.

This is what the evaluation stage adds to the episode layer (docs/method.md,
"Evaluation"): trials go through ``rewardbox.episode.run.run_trials`` into a
crash-safe journal together with each trial's ThinkingBox ``DecodeResult``
(so an export after a resume is whole); then one repair pass re-runs the keys
that are missing or ended in a system error; coverage (every ``(uid, trial)``
exactly once, none unexpected) is the blocking gate before any metric.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from rewardbox.episode.campaign import ROW_SCHEMA, campaign_keys, coverage_problems
from rewardbox.episode.executor import EpisodeExecutor
from rewardbox.episode.journal import CampaignJournal
from rewardbox.episode.parts import CampaignParts
from rewardbox.episode.progress import ProgressSink
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.evaluation.repair import run_with_repair
from rewardbox.policy.base import Policy
from rewardbox.tasks.schema import Task
from rewardbox.thinkingbox.interchange import decode_result_json

DECODE_COLUMN = "decode_result"
EVALUATION_JOURNAL_SCHEMA = {**ROW_SCHEMA, DECODE_COLUMN: pl.Utf8}
"""Journal rows of an evaluation: the trial row plus its ``DecodeResult`` JSON."""


@dataclass(frozen=True)
class EvaluationRun:
    """What one evaluation campaign leaves.

    Attributes:
        rows: one row per ``(uid, trial)`` in ``ROW_SCHEMA``, sorted by key.
        repaired_keys: keys the repair pass re-ran (missing or system error after the first pass).
        decode_lines: the ``DecodeResult`` JSON of each row, in the order of ``rows``.
    """

    rows: pl.DataFrame
    repaired_keys: int
    decode_lines: list[str]


def _decode_column(result: EpisodeResult, task: Task) -> dict[str, str]:
    """The trial's DecodeResult JSON, kept in the journal so the export is whole after a resume."""
    return {DECODE_COLUMN: decode_result_json(result, task)}


def run_evaluation(
    tasks: Sequence[Task],
    trials: int,
    make_policy: Callable[[], Policy],
    parts: CampaignParts,
    journal: CampaignJournal,
    *,
    executor: EpisodeExecutor | None = None,
    log: ProgressSink | None = None,
    label: str = "evaluation",
    on_result: Callable[[EpisodeResult], None] | None = None,
) -> EvaluationRun:
    """Every task x ``trials``; one repair pass re-runs missing or system-error keys.

    Trials are written to ``journal`` as they finish, so a killed run resumes
    where it stopped when called again with the same journal.

    Args:
        tasks: the benchmark tasks.
        trials: n, trials per task (trial ``0..n-1``).
        make_policy: builds a fresh policy per pass (``run_trials`` closes the one it is given).
        parts: the campaign's runner, episode limits and executor config
            (``rewardbox.runtime.compose.campaign_parts``).
        journal: the campaign's journal, opened with ``EVALUATION_JOURNAL_SCHEMA``.
        executor: where episodes run (None: the parts').
        log: progress sink; label: names the first pass in it.
        on_result: called with every finished episode (e.g. the parser-parity recorder).

    Returns:
        The rows, the number of repaired keys and the DecodeResult lines. Keys
        still in system error after the repair keep their system-error row
        (never a reward of 0); the coverage gate reports any missing key.

    Raises:
        What ``run_trials`` raises (a config error, a token budget too small).
    """

    rows, repaired = run_with_repair(
        tasks,
        trials,
        make_policy,
        parts,
        log=log,
        label=label,
        journal=journal,
        journal_extra=_decode_column,
        keep_results=False,
        executor=executor,
        on_result=on_result,
    )
    return EvaluationRun(rows.drop(DECODE_COLUMN), repaired, rows[DECODE_COLUMN].to_list())


def check_coverage(rows: pl.DataFrame, tasks: Sequence[Task], trials: int) -> list[str]:
    """Coverage of an evaluation: ``"missing (uid, trial)"`` / duplicate / unexpected keys; [] when complete."""
    return coverage_problems(rows, campaign_keys(tasks, trials))
