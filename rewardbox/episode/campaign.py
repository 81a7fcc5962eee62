"""Campaigns: every (uid, trial) key run once, their rows, coverage checks and repair.

Probes (n trials of each candidate task), screening (one golden and one null
trial per task) and evaluations (n trials of each benchmark task) are all
campaigns; ``rewardbox.episode.run.run_trials`` runs one from a profile. Coverage is validated before any metric
(docs/method.md, "Evaluation"): every expected key present exactly once, none
unexpected. A repair run executes only missing or system-error keys.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import polars as pl

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.tasks.schema import Task

TrialFn = Callable[[Task, int], Awaitable[EpisodeResult]]
"""Runs one trial of a task: ``(task, trial) -> EpisodeResult`` (e.g. ``partial(run_trial, runner)``)."""

ROW_SCHEMA = {
    "uid": pl.Utf8,
    "domain": pl.Utf8,
    "trial": pl.Int64,
    "reward": pl.Float64,
    "passed": pl.Boolean,
    "system_error": pl.Utf8,
    "system_error_kind": pl.Utf8,
    "retried_system_error_kinds": pl.List(pl.Utf8),
    "termination_reason": pl.Utf8,
    "turns": pl.Int64,
    "input_tokens": pl.Int64,
    "cached_input_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "duration_s": pl.Float64,
    "tries": pl.Int64,
    "truncated_turns": pl.Int64,
}
"""One row per trial (``EpisodeResult.to_row`` plus ``domain``); docs/episode_layer.md lists the columns."""

LEGACY_COLUMNS = {
    "finish_reason": "termination_reason",
    "seconds": "duration_s",
    "attempts": "tries",
}
"""Column names of rows written before the one-name-per-concept renames -> today's names."""


def upgrade_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """Rows written under the old column names (``LEGACY_COLUMNS``) renamed to today's; others unchanged.

    Values are unchanged (termination reasons kept their strings). A frame that
    holds both an old and a new name keeps the new column and drops the old one.

    Args:
        rows: trial rows of any age, e.g. a Parquet file of an earlier run.

    Returns:
        The same rows with ``termination_reason``, ``duration_s`` and ``tries``.
    """
    stale = [
        old for old, new in LEGACY_COLUMNS.items() if old in rows.columns and new in rows.columns
    ]
    rows = rows.drop(stale)
    return rows.rename({old: new for old, new in LEGACY_COLUMNS.items() if old in rows.columns})


def campaign_keys(tasks: Sequence[Task], trials: int) -> list[tuple[str, int]]:
    """All ``(uid, trial)`` keys of a tasks x trials campaign, trial in ``0..trials-1``."""
    return [(t.uid, i) for t in tasks for i in range(trials)]


async def run_campaign(
    tasks: Sequence[Task],
    keys: Iterable[tuple[str, int]],
    trial_fn: TrialFn,
    *,
    concurrency: int = 8,
    on_result: Callable[[EpisodeResult], None] | None = None,
    collect: Callable[[EpisodeResult], Any] | None = None,
) -> list[Any]:
    """Run every key with at most ``concurrency`` episodes in flight.

    ``concurrency`` workers take the next key as they finish one, so a campaign
    holds only the episodes in flight and what ``collect`` keeps of each
    finished one: memory stays flat over any number of keys when ``collect``
    keeps a row rather than the whole result (its messages, effects, states).

    Args:
        tasks: the tasks the keys refer to (by uid).
        keys: ``(uid, trial)`` pairs to run.
        trial_fn: runs one trial (e.g. ``partial(run_trial, runner)``).
        concurrency: keys in flight (``trial_fn`` calls awaited at once); an executor
            session's ``width``, whose own bound then limits the open sandboxes. A
            batching local policy groups the completions of the keys in flight.
        on_result: called after each trial (progress logging, a journal).
        collect: what to keep of each result (default: the ``EpisodeResult`` itself).

    Returns:
        ``collect(result)`` per key, in key order. System errors are results
        with ``system_error`` set.
    """
    by_uid = {t.uid: t for t in tasks}
    keys = list(keys)
    kept: list[Any] = [None] * len(keys)
    pending = iter(enumerate(keys))  # shared by the workers: each takes the next key

    async def worker() -> None:
        for index, (uid, trial) in pending:
            result = await trial_fn(by_uid[uid], trial)
            if on_result is not None:
                on_result(result)
            kept[index] = result if collect is None else collect(result)

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(keys))))))
    return kept


def results_frame(results: Sequence[EpisodeResult], tasks: Sequence[Task]) -> pl.DataFrame:
    """One row per trial (schema ``ROW_SCHEMA``), domain taken from the task."""
    domain = {t.uid: t.domain for t in tasks}
    return rows_frame([result_row(r, domain) for r in results])


def result_row(result: EpisodeResult, domain: Mapping[str, str]) -> dict[str, Any]:
    """The Parquet row of one trial: ``EpisodeResult.to_row`` plus the task's domain (uid -> domain map)."""
    return {**result.to_row(), "domain": domain.get(result.uid, "")}


def rows_frame(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """Trial rows (``result_row`` dicts) as a DataFrame with schema ``ROW_SCHEMA``."""
    return pl.DataFrame(list(rows), schema=ROW_SCHEMA)


def system_error_counts(rows: pl.DataFrame) -> dict[str, int]:
    """System errors per kind: the kinds of rows still in error plus those of retried tries.

    A retried fault is counted even when its trial was then scored, so a run's
    metadata shows every infrastructure fault it met, not only the unrepaired ones.

    Returns:
        ``{kind: count}`` sorted by kind; ``{}`` when the run met none.
    """
    kinds: list[str] = []
    if "system_error_kind" in rows.columns:
        final = rows.filter(pl.col("system_error").is_not_null())["system_error_kind"].fill_null(
            "system_error"
        )
        kinds += final.to_list()
    if "retried_system_error_kinds" in rows.columns:
        kinds += rows["retried_system_error_kinds"].explode().drop_nulls().to_list()
    return dict(sorted(Counter(kinds).items()))


def coverage_problems(rows: pl.DataFrame, expected: Iterable[tuple[str, int]]) -> list[str]:
    """Every expected (uid, trial) exactly once and none unexpected; [] means complete."""
    expected = set(expected)
    seen = Counter(zip(rows["uid"].to_list(), rows["trial"].to_list()))
    problems = [f"missing {key}" for key in sorted(expected - set(seen))]
    problems += [f"duplicate {key} x{count}" for key, count in sorted(seen.items()) if count > 1]
    problems += [f"unexpected {key}" for key in sorted(set(seen) - expected)]
    return problems


def repair_keys(rows: pl.DataFrame, expected: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Keys to re-run: expected keys that are missing or whose row is a system error."""
    clean = rows.filter(pl.col("system_error").is_null())
    done = set(zip(clean["uid"].to_list(), clean["trial"].to_list()))
    return [key for key in expected if key not in done]


def merge_repair(rows: pl.DataFrame, repaired: pl.DataFrame) -> pl.DataFrame:
    """Replace rows of repaired keys by their new rows (one row per key remains)."""
    keys = repaired.select("uid", "trial")
    kept = rows.join(keys, on=["uid", "trial"], how="anti")
    return pl.concat([kept, repaired]).sort(["uid", "trial"])
